"""Each built-in op at a fixed parameter, on real photos, against the independent references
in oracles_transforms (PIL's ImageEnhance / ImageOps / transforms, as torchvision's PIL path
uses them): the numpy version and the torch batched version both."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import oracles_transforms as oracle
from feedline.transforms import (ColorJitter, GaussianBlur, RandAugment, RandomErasing, RandomGrayscale,
                                 TrivialAugmentWide)
from feedline.transforms import color
from feedline.transforms.autoaugment import apply_op_np, apply_op_t
from feedline.transforms.erasing import erase_boxes

PHOTOS = [oracle.photo(i) for i in range(3)]

EXACT = [("ShearX", 0.27), ("ShearX", -0.9), ("ShearY", 0.3), ("ShearY", -0.21),
         ("TranslateX", -20.7), ("TranslateX", 32.0), ("TranslateY", 13.2), ("Posterize", 4),
         ("Posterize", 2), ("Solarize", 128.0), ("Solarize", 200.0), ("Equalize", 0.0),
         ("Identity", 0.0)]
# PIL truncates a blend where torchvision's tensor path and feedline round: one level apart
BLENDS = [("Brightness", 0.6), ("Brightness", -0.5), ("Color", 0.8), ("Color", -0.9),
          ("Contrast", 0.7), ("Contrast", -0.6), ("Sharpness", 0.9), ("Sharpness", -0.9),
          ("AutoContrast", 0.0)]


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


@pytest.mark.parametrize("op,magnitude", BLENDS)
def test_blend_ops_are_within_one_level_of_pil(op, magnitude):
    for img in PHOTOS:
        ref = oracle.apply_op(img, op, magnitude)
        for out in (apply_op_np(op, img, magnitude, 0),
                    batched(lambda x: apply_op_t(op, x, np.array([magnitude]), 0), img)):
            # one level, or two where OpenCV's fixed-point luma rounds the other way than PIL's
            assert diff(out, ref).max() <= 2 and (diff(out, ref) > 1).mean() < 0.003
            assert diff(out, ref).mean() < 0.7


@pytest.mark.parametrize("degrees", [27.0, -13.0, 135.0, -135.0])
def test_rotate_matches_pil_rotate_but_for_ties_on_diagonals(degrees):
    for img in PHOTOS:
        ref = oracle.apply_op(img, "Rotate", degrees)
        for out in (apply_op_np("Rotate", img, degrees, 0),
                    batched(lambda x: apply_op_t("Rotate", x, np.array([degrees]), 0), img)):
            assert (diff(out, ref).max(axis=2) > 1).mean() < 0.02
            assert diff(out, ref).mean() < 0.6
        assert diff(ref, img).mean() > 5


def test_geometric_ops_fill_outside_with_the_fill_colour():
    img, fill = PHOTOS[0], (10, 200, 30)
    ref = oracle.apply_op(img, "TranslateX", 25.0, fill)
    assert diff(apply_op_np("TranslateX", img, 25.0, fill), ref).max() == 0
    assert diff(batched(lambda x: apply_op_t("TranslateX", x, np.array([25.0]), fill), img), ref).max() == 0
    assert (ref[:, :25] == fill).all()


def test_a_batch_applies_each_samples_own_magnitude():
    imgs = np.stack(PHOTOS)
    mags = np.array([-20.0, 0.0, 17.0])
    x = torch.from_numpy(imgs).permute(0, 3, 1, 2).float()
    out = apply_op_t("TranslateY", x, mags, 0).permute(0, 2, 3, 1).numpy().astype(np.uint8)
    for i, img in enumerate(PHOTOS):
        assert diff(out[i], oracle.apply_op(img, "TranslateY", mags[i])).max() == 0


@pytest.mark.parametrize("shift", [0.1, -0.3, 0.5])
def test_hue_is_within_pil_hsv_rounding(shift):
    for img in PHOTOS:
        ref = oracle.hue_pil(img, shift)
        for out in (color.hue_np(img, shift), batched(color.hue_t, img, np.array([shift]))):
            assert diff(out, ref).mean() < 1.5
            assert diff(out, ref).max() <= 8
        assert diff(ref, img).mean() > 5


def test_grayscale_matches_pil_convert_l():
    op = RandomGrayscale(1.0)
    for img in PHOTOS:
        ref = oracle.gray_pil(img)
        assert diff(op.apply_cpu(img, {"apply": True}), ref).max() <= 1
        assert diff(batched(lambda x: op.apply_torch(x, {"apply": np.array([True])}), img), ref).max() <= 1
        assert op.apply_cpu(img, {"apply": False}) is img


@pytest.mark.parametrize("kernel_size,sigma", [((5, 5), 1.3), ((3, 9), 2.0), ((7, 1), 0.4)])
def test_gaussian_blur_matches_the_kernel_written_out(kernel_size, sigma):
    op = GaussianBlur(kernel_size)
    for img in PHOTOS:
        ref = oracle.gaussian_blur(img, kernel_size, sigma)
        for out in (op.apply_cpu(img, {"sigma": sigma}),
                    batched(lambda x: op.apply_torch(x, {"sigma": np.array([sigma])}), img)):
            assert diff(out, ref).max() <= 1
            assert diff(out, ref).mean() < 0.05


def test_erase_boxes_follow_torchvisions_get_params():
    rng = np.random.default_rng(5)
    u = rng.random((400, 22))
    for scale, ratio, (h, w) in [((0.02, 0.33), (0.3, 3.3), (72, 96)), ((0.7, 1.0), (0.2, 5.0), (40, 30))]:
        boxes = erase_boxes(u, h, w, scale, ratio)
        want = [oracle.erase_params(list(r), h, w, scale, ratio) for r in u]
        assert [tuple(b) for b in boxes.tolist()] == want
        assert any(b[2] == 0 for b in want) == (scale[0] >= 0.7)  # big boxes sometimes never fit


def test_random_erasing_fills_exactly_its_box():
    op = RandomErasing(p=1.0, value=(7, 8, 9))
    img = PHOTOS[1]
    u = np.random.default_rng(1).random((1, 22))
    top, left, h, w = erase_boxes(u, *img.shape[:2], op.scale, op.ratio)[0]
    assert h > 0
    want = img.copy()
    want[top:top + h, left:left + w] = (7, 8, 9)
    p = {"apply": True, "u": u[0]}
    assert np.array_equal(op.apply_cpu(img, p), want)
    assert np.array_equal(batched(lambda x: op.apply_torch(x, {"apply": np.array([True]), "u": u}), img), want)
    assert np.array_equal(op.apply_cpu(img, {"apply": False, "u": u[0]}), img)


def test_color_jitter_applies_its_factors_in_the_drawn_order():
    op = ColorJitter(0.4, 0.4, 0.4, 0.1)
    factors, order = np.array([1.3, 0.7, 1.2, 0.08]), np.array([3, 0, 2, 1])
    steps = {0: lambda im: oracle.enhance("Brightness", im, 1.3),
             1: lambda im: oracle.enhance("Contrast", im, 0.7),
             2: lambda im: oracle.enhance("Color", im, 1.2),
             3: lambda im: oracle.hue_pil(im, 0.08)}
    for img in PHOTOS:
        ref = img
        for j in order:
            ref = steps[j](ref)
        p = {"factors": factors, "order": order}
        for out in (op.apply_cpu(img, p),
                    batched(lambda x: op.apply_torch(x, {"factors": factors[None], "order": order[None]}), img)):
            assert diff(out, ref).mean() < 2.5  # PIL truncates four times where feedline rounds
        other = op.apply_cpu(img, {"factors": factors, "order": np.array([0, 1, 2, 3])})
        assert diff(other, ref).mean() > diff(op.apply_cpu(img, p), ref).mean()  # order matters


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


def test_random_erasing_noise_is_normalized_normal_noise_in_pixel_units_on_both_paths():
    op = RandomErasing(p=1.0, scale=(0.3, 0.3), ratio=(1.0, 1.0), value="random")
    x = torch.from_numpy(np.stack(PHOTOS)).permute(0, 3, 1, 2)
    params = op.draw(2, 0, np.arange(3))
    host = np.stack([op.apply_cpu(img, {k: v[i] for k, v in params.items()}) for i, img in enumerate(PHOTOS)])
    dev = op.apply_torch(x.float(), params).permute(0, 2, 3, 1).numpy()
    assert np.array_equal(host, dev)
    top, left, h, w = op._boxes(params, 72, 96)[0]
    patch = host[0, top:top + h, left:left + w].reshape(-1, 3).astype(np.float64)
    assert np.allclose(patch.mean(0), 255 * np.array(op.mean), atol=6)
    assert np.allclose(patch.std(0), 255 * np.array(op.std), atol=6)
    again = op.apply_cpu(PHOTOS[0], {k: v[0] for k, v in op.draw(2, 0, [0]).items()})
    assert np.array_equal(again, host[0])
    assert not np.array_equal(host[1][top:top + h, left:left + w], host[0][top:top + h, left:left + w])
