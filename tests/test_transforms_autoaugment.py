"""transforms/autoaugment.py: RandAugment and TrivialAugmentWide, each op at a fixed
parameter against torchvision's PIL path (oracles_transforms), numpy and torch batched both;
their draws follow their definitions."""
from __future__ import annotations

from draws_helpers import CHI2_999
from draws_helpers import INDICES
from draws_helpers import N
from feedline.transforms.autoaugment import OPS
from feedline.transforms.autoaugment import SIGNED
from draws_helpers import chi_square
from feedline.transforms.autoaugment import magnitude
import numpy as np
import pytest
import torch
import oracles_transforms as oracle
from feedline.transforms import (RandAugment, TrivialAugmentWide)


from feedline.transforms.autoaugment import apply_op_np, apply_op_t


PHOTOS = [oracle.photo(i) for i in range(3)]

EXACT = [("ShearX", 0.27), ("ShearX", -0.9), ("ShearY", 0.3), ("ShearY", -0.21),
         ("TranslateX", -20.7), ("TranslateX", 32.0), ("TranslateY", 13.2), ("Posterize", 4),
         ("Posterize", 2), ("Solarize", 128.0), ("Solarize", 200.0), ("Equalize", 0.0),
         ("Identity", 0.0)]


def batched(fn, img: np.ndarray, *args) -> np.ndarray:
    """Run a torch op on a batch of one built from ``img``; back to uint8 H x W x 3."""
    x = torch.from_numpy(img).permute(2, 0, 1)[None].float()
    out = fn(x, *args)
    assert out.dtype == torch.float32 and torch.equal(out, out.round())  # whole numbers
    return out[0].permute(1, 2, 0).numpy().astype(np.uint8)

def diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.astype(np.int64) - b.astype(np.int64))


@pytest.mark.parametrize("op,magnitude", EXACT)
def test_exact_ops_equal_torchvisions_pil_path(op, magnitude):
    for img in PHOTOS:
        ref = oracle.apply_op(img, op, magnitude)
        assert diff(apply_op_np(op, img, magnitude, 0), ref).max() == 0
        assert diff(batched(lambda x: apply_op_t(op, x, np.array([magnitude]), 0), img), ref).max() == 0
        if op != "Identity":
            assert (ref != img).any()  # the op does something, so equality means something


def test_a_batch_applies_each_samples_own_magnitude():
    imgs = np.stack(PHOTOS)
    mags = np.array([-20.0, 0.0, 17.0])
    x = torch.from_numpy(imgs).permute(0, 3, 1, 2).float()
    out = apply_op_t("TranslateY", x, mags, 0).permute(0, 2, 3, 1).numpy().astype(np.uint8)
    for i, img in enumerate(PHOTOS):
        assert diff(out[i], oracle.apply_op(img, "TranslateY", mags[i])).max() == 0


@pytest.mark.parametrize("make,wide", [(lambda: RandAugment(2, 9), False), (lambda: RandAugment(1, 30), False),
                                       (lambda: TrivialAugmentWide(), True)])
def test_auto_augment_end_to_end_is_torchvisions_forward_with_the_same_draws(make, wide):
    """Drawn op, bin and sign through torchvision's own table and _apply_op (PIL), per sample;
    a non-square photo, so TranslateX / TranslateY must use the width / the height."""
    op = make()
    params = op.draw(3, 0, np.arange(120))
    seen, mads, exact = set(), [], 0
    for i in range(120):
        img = PHOTOS[i % 3]
        h, w = img.shape[:2]
        ref = img
        for k in range(params["op"].shape[1]):
            name = oracle.OPS[params["op"][i, k]]
            values, signed = oracle.augmentation_space(op.num_magnitude_bins, [w, h], wide)[name]
            m = float(values[params["bin"][i, k]]) if values.ndim else 0.0
            if signed and params["negative"][i, k]:
                m = -m
            ref = oracle.apply_op(ref, name, m)
            seen.add(name)
        out = op.apply_cpu(img, {key: v[i] for key, v in params.items()})
        names = {oracle.OPS[c] for c in params["op"][i]}
        if names <= {"Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Posterize", "Solarize",
                     "Equalize"}:
            # equal but for ties: where a sheared point falls exactly on a pixel edge, PIL's path
            # and torchvision's tensor path (which feedline follows: test_transforms_torchvision)
            # take the pixels on either side
            assert (diff(out, ref).max(axis=2) > 0).mean() < 0.01, (i, names)
            exact += 1
        mads.append(diff(out, ref).mean())
    # elsewhere PIL's truncating blends and luma, one level apart, which Equalize may stretch
    assert len(seen) == 14 and exact >= 10
    assert np.mean(mads) < 0.4 and max(mads) < 3, max(mads)


def test_randaugment_picks_ops_uniformly_with_fair_signs():
    p = RandAugment(num_ops=2, magnitude=9).draw(7, 0, INDICES)
    assert p["op"].shape == (N, 2) and (p["bin"] == 9).all()
    for k in range(2):
        assert chi_square(np.bincount(p["op"][:, k], minlength=14)) < CHI2_999[13]
    assert abs(p["negative"].mean() - 0.5) < 0.01
    assert abs(np.corrcoef(p["op"][:, 0], p["op"][:, 1])[0, 1]) < 0.03  # slots independent


def test_trivial_augment_picks_ops_and_bins_uniformly():
    p = TrivialAugmentWide().draw(7, 0, INDICES)
    assert chi_square(np.bincount(p["op"][:, 0], minlength=14)) < CHI2_999[13]
    assert chi_square(np.bincount(p["bin"][:, 0], minlength=31)) < CHI2_999[30]


@pytest.mark.parametrize("wide", [False, True])
def test_magnitude_tables_are_torchvisions(wide):
    space = oracle.augmentation_space(31, [224, 160], wide)
    assert list(space) == list(OPS)
    for op, (values, signed) in space.items():
        assert (op in SIGNED) == signed
        if values.ndim:
            mine = magnitude(op, np.arange(31), 31, 160, 224, wide)
            assert np.allclose(mine, values.double().numpy(), atol=1e-4), op


@pytest.mark.parametrize("op", [RandAugment(num_ops=2, magnitude=9), TrivialAugmentWide()], ids=["rand", "trivial"])
def test_each_signed_op_is_negated_half_the_time(op):
    """The sign has its own draw: every signed op, in every slot, comes out negative about
    half the time (a sign read from the op's own column makes each op always one sign while
    the overall share stays 0.5)."""
    p = op.draw(7, 0, INDICES)
    for k in range(p["op"].shape[1]):
        for code, name in enumerate(OPS):
            if name not in SIGNED:
                continue
            negative = p["negative"][p["op"][:, k] == code, k]
            assert len(negative) > 500 and abs(negative.mean() - 0.5) < 0.08, (name, k, negative.mean())
