"""The CPU's one-pass mixing (feedline.transforms.mix_rows) against the whole-batch way
(mix.mix_batch, the device path, itself checked against timm's and torchvision's statements
in test_transforms_mix.py), bit for bit, on real photos, in every mode, dtype and layout."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import oracles_transforms as oracle
from feedline.transforms import CutMix, Mixup, MixUp, mix, mix_rows
from feedline.transforms.scratch import Scratch

H, W = 40, 56
PHOTOS = np.stack([oracle.photo(i, H, W) for i in range(7)])
MIXERS = [Mixup(0.8, 0.0, num_classes=10), Mixup(0.0, 1.0, num_classes=10),
          Mixup(0.8, 1.0, mode="pair", num_classes=10), Mixup(0.8, 1.0, mode="elem", prob=0.7, num_classes=10),
          MixUp(0.4, num_classes=10), CutMix(1.0, num_classes=10), MixUp(0.4, num_classes=10, mode="elem"),
          CutMix(1.0, num_classes=10, mode="elem")]


def photos(n: int, dtype: torch.dtype, layout=torch.contiguous_format) -> torch.Tensor:
    """``n`` photos as the loader hands them over: normalized floats (negative values too), or uint8."""
    x = torch.from_numpy(PHOTOS[:n]).permute(0, 3, 1, 2).float()
    x = x if dtype == torch.uint8 else (x / 255 - 0.45) / 0.22
    return x.to(dtype).contiguous(memory_format=layout)


def by_rows(mixer, x: torch.Tensor, params: dict) -> torch.Tensor:
    draw = mix_rows.RowDraw.of(params["lam"], params["cutmix"], params["boxes"], mixer.mode == "batch")
    return mix_rows.mix_rows(x, mixer.PAIRING, draw, Scratch())


def whole_batch(mixer, x: torch.Tensor, params: dict) -> torch.Tensor:
    partners = mixer.partners(len(x), x.device)
    return mix.mix_batch(x, partners, params, mixer.mode == "batch", (Scratch(), Scratch()))


@pytest.mark.parametrize("mixer", MIXERS, ids=lambda m: f"{type(m).__name__}-{m.mode}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.uint8])
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_rows_give_the_whole_batch_ways_pixels_bit_for_bit(mixer, dtype, layout):
    checked = set()
    for n in (1, 2, 5, 6, 7):   # odd batches have a middle sample (timm: its own partner)
        for first in range(0, 30, 5):
            x = photos(n, dtype, layout)
            params = mixer.draw(3, 0, np.arange(first, first + n), H, W)
            rows = by_rows(mixer, x.clone(), params)
            assert rows.dtype == dtype and rows.is_contiguous(memory_format=layout)
            assert torch.equal(rows, whole_batch(mixer, x.clone(), params))
            checked.update("cut" if c else ("mix" if lam < 1 else "none")
                           for c, lam in zip(params["cutmix"], params["lam"]))
    assert checked >= ({"mix"} if mixer.cutmix_alpha == 0 else {"cut"} if mixer.mixup_alpha == 0
                       else {"mix", "cut", "none"} if mixer.prob < 1 else {"mix", "cut"})


def test_rows_are_mixed_in_place_and_only_where_timm_writes():
    """An unmixed sample is not written (timm skips it) even beside a partner holding NaN, and
    a cut sample keeps its own bits outside the box, negative zeros included."""
    mixer = Mixup(0.8, 1.0, mode="elem", prob=0.6, num_classes=10)
    seen = set()
    for first in range(0, 200, 6):
        params = mixer.draw(1, 0, np.arange(first, first + 6), H, W)
        x = photos(6, torch.float32)
        x[:, :, :2] = -0.0
        x[params["lam"] == 1.0, 0, -1, -1] = float("nan")
        before = x.clone()
        assert by_rows(mixer, x, params) is x
        for k, (lam, cut, (y0, y1, x0, x1)) in enumerate(zip(params["lam"], params["cutmix"], params["boxes"])):
            keep = torch.ones(H, W, dtype=torch.bool)
            if cut:
                keep[y0:y1, x0:x1] = False
            elif lam != 1.0:
                continue
            assert torch.equal(x[k][:, keep].view(torch.int32), before[k][:, keep].view(torch.int32))
            seen.add("cut" if cut else "none")
    assert seen == {"cut", "none"}


@pytest.mark.parametrize("pairing,n,want", [
    ("flip", 5, [((0, 4), (4, 0)), ((1, 3), (3, 1)), ((2,), (2,))]),
    ("roll", 5, [((3, 4), (2, 3)), ((1, 2), (0, 1)), ((0,), (4,))]),
    ("roll", 4, [((2, 3), (1, 2)), ((1,), (0,)), ((0,), (3,))]),
    ("roll", 1, [((0,), (0,))])])
def test_units_pair_timms_and_torchvisions_partners(pairing, n, want):
    assert [(u.rows, u.partners) for u in mix_rows.units(pairing, n)] == want


@pytest.mark.parametrize("pairing", ["flip", "roll"])
def test_every_unit_finds_its_partners_unmixed(pairing):
    """Run in order, no unit reads a sample an earlier unit wrote, but the first sample's
    partner under torchvision's roll, kept aside before anything is written (``other`` None);
    every sample is written by one unit, its partner the pairing's."""
    for n in range(1, 12):
        written, seen = set(), []
        for unit in mix_rows.units(pairing, n):
            span = list(range(n))[unit.span[0]::unit.span[1]][:unit.span[2]]
            assert span[unit.own] == list(unit.rows)
            if unit.other is not None:
                assert span[unit.other] == list(unit.partners)
                assert not written & set(unit.partners)
            else:
                assert unit.rows == (0,) and unit.partners == (n - 1,) and pairing == "roll"
            written |= set(unit.rows)
            seen += unit.rows
        assert sorted(seen) == list(range(n))
        partner = {u: p for unit in mix_rows.units(pairing, n) for u, p in zip(unit.rows, unit.partners)}
        assert partner == {i: (n - 1 - i if pairing == "flip" else (i - 1) % n) for i in range(n)}


def test_only_large_dense_cpu_batches_are_mixed_by_rows():
    big = torch.zeros(7, 3, 224, 224)
    assert mix_rows.fits(big) and mix_rows.fits(big.contiguous(memory_format=torch.channels_last))
    assert mix_rows.fits(big.to(torch.bfloat16)) and mix_rows.fits(big.to(torch.uint8))
    assert not mix_rows.fits(big[:6])                        # 3.6 MB: the whole-batch way, in cache
    assert not mix_rows.fits(torch.zeros(1024, 3, 32, 32))   # 12 KB samples: a unit costs more than it mixes
    assert not mix_rows.fits(torch.zeros(9, 3, 224, 224)[:, :, :, :200])   # a sample is not one dense block
    assert not mix_rows.fits(big.double()) and not mix_rows.fits(big.requires_grad_())
    assert not mix_rows.fits(torch.zeros(0, 3, 224, 224))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.uint8])
@pytest.mark.parametrize("mixer", [Mixup(0.8, 1.0, mode="elem", switch_prob=0.5, label_smoothing=0.1, num_classes=10),
                                   CutMix(1.0, num_classes=10)], ids=["timm-elem", "torchvision-CutMix"])
def test_a_large_cpu_batch_is_mixed_in_place_by_rows_with_the_same_pixels(mixer, dtype):
    n, size = 9, 224
    x = torch.from_numpy(np.stack([oracle.photo(i, size, size) for i in range(n)])).permute(0, 3, 1, 2)
    x = x.to(dtype) if dtype == torch.uint8 else ((x / 255 - 0.45) / 0.22).to(dtype)
    for first in range(0, 27, n):
        params = mixer.draw(5, 0, np.arange(first, first + n), size, size)
        given = x.clone()
        images, targets = mixer.apply(given, torch.arange(n), params)
        assert images is given and torch.equal(images, whole_batch(mixer, x.clone(), params))
        assert targets.shape == (n, 10)
