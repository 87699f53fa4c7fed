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


def test_the_luma_is_the_float32_sum_of_the_weighted_channels():
    """Every (r, g) pair with a spread of b: the table path floors ((r * 0.2989) + g * 0.587) +
    b * 0.114 in float32, exactly as the batch computes it."""
    r, g, b = np.meshgrid(np.arange(256), np.arange(256), np.arange(0, 256, 17), indexing="ij")
    img = np.stack([r, g, b], -1).reshape(256, -1, 3).astype(np.uint8)
    f = img.astype(np.float32)
    want = ((f[..., 0] * color.GRAY[0] + f[..., 1] * color.GRAY[1]) + f[..., 2] * color.GRAY[2]).astype(np.uint8)
    assert np.array_equal(color.gray_floor_np(img), want)
    assert np.array_equal(batched(color.grayscale_t, img)[..., 0], want)


ONE_IMAGE_OPS = {"brightness": (color.brightness_np, color.brightness_t),
                 "contrast": (color.contrast_np, color.contrast_t),
                 "saturation": (color.saturation_np, color.saturation_t),
                 "sharpness": (color.sharpness_np, color.sharpness_t)}


@pytest.mark.parametrize("name", sorted(ONE_IMAGE_OPS))
def test_one_image_and_a_batch_give_the_same_pixels(name):
    """The same float32 steps on both sides, at RandAugment's, timm's and ColorJitter's factors."""
    one_fn, batch_fn = ONE_IMAGE_OPS[name]
    for i, (h, w) in enumerate([(224, 224), (37, 53)]):
        img = oracle.photo(i, h, w)
        for factor in (0.1, 0.37, 0.73, 1.0, 1.27, 1.6, 1.9, 2.5):
            assert np.array_equal(one_fn(img, factor), batched(lambda x: batch_fn(x, np.array([factor])), img)), \
                (name, h, w, factor)


def test_grayscale_one_image_and_a_batch_give_the_same_pixels():
    img = oracle.photo(2, 224, 224)
    assert np.array_equal(color.grayscale_np(img), batched(color.grayscale_t, img))


def test_hue_one_image_and_a_batch_agree_to_a_level():
    img = oracle.photo(0, 224, 224)
    for shift in (-0.5, -0.21, 0.05, 0.33):
        d = diff(color.hue_np(img, shift), batched(color.hue_t, img, np.array([shift])))
        assert d.max() <= 1 and (d > 0).mean() < 0.01
