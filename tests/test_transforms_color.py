"""transforms/color.py: the blend ops, hue and grayscale against PIL (oracles_transforms),
numpy and torch batched both."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import oracles_transforms as oracle
from feedline.transforms import RandomGrayscale
from feedline.transforms import color
from feedline.transforms.autoaugment import apply_op_np, apply_op_t


PHOTOS = [oracle.photo(i) for i in range(3)]


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


@pytest.mark.parametrize("op,magnitude", BLENDS)
def test_blend_ops_are_within_one_level_of_pil(op, magnitude):
    for img in PHOTOS:
        ref = oracle.apply_op(img, op, magnitude)
        for out in (apply_op_np(op, img, magnitude, 0),
                    batched(lambda x: apply_op_t(op, x, np.array([magnitude]), 0), img)):
            # one level, or two where OpenCV's fixed-point luma rounds the other way than PIL's
            assert diff(out, ref).max() <= 2 and (diff(out, ref) > 1).mean() < 0.003
            assert diff(out, ref).mean() < 0.7


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
