"""transforms/tone.py: posterize, solarize, autocontrast and equalize against PIL's ImageOps
(what torchvision's PIL path runs), numpy and torch batched both, on real photos."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

import oracles_transforms as oracle
from feedline.transforms import tone

PHOTOS = [oracle.photo(i) for i in range(3)]


def batched(fn, img: np.ndarray, *args) -> np.ndarray:
    """The torch op on a batch of one built from ``img``, back to uint8 H x W x 3."""
    out = fn(torch.from_numpy(img).permute(2, 0, 1)[None].float(), *args)
    return out[0].permute(1, 2, 0).numpy().astype(np.uint8)


@pytest.mark.parametrize("bits", [1, 4, 7])
def test_posterize_keeps_the_high_bits_as_pil(bits):
    for img in PHOTOS:
        want = np.asarray(ImageOps.posterize(Image.fromarray(img), bits))
        assert np.array_equal(tone.posterize_np(img, bits), want)
        assert np.array_equal(batched(tone.posterize_t, img, [bits]), want)


@pytest.mark.parametrize("threshold", [0.0, 128.0, 200.0])
def test_solarize_inverts_at_and_above_the_threshold_as_pil(threshold):
    for img in PHOTOS:
        want = np.asarray(ImageOps.solarize(Image.fromarray(img), threshold))
        assert np.array_equal(tone.solarize_np(img, threshold), want)
        assert np.array_equal(batched(tone.solarize_t, img, [threshold]), want)


def test_equalize_is_pils():
    for img in PHOTOS:
        want = np.asarray(ImageOps.equalize(Image.fromarray(img)))
        assert np.array_equal(tone.equalize_np(img), want)
        assert np.array_equal(batched(tone.equalize_t, img), want)


def test_autocontrast_is_within_one_level_of_pil():
    """PIL's table truncates where the torch path and the numpy table may land one level off."""
    for img in PHOTOS:
        want = np.asarray(ImageOps.autocontrast(Image.fromarray(img))).astype(np.int64)
        for got in (tone.autocontrast_np(img), batched(tone.autocontrast_t, img)):
            assert np.abs(got.astype(np.int64) - want).max() <= 1


def test_a_flat_channel_stays_as_it_is():
    flat = np.full((8, 8, 3), 77, np.uint8)
    for name in ("autocontrast", "equalize"):
        assert np.array_equal(getattr(tone, f"{name}_np")(flat), flat)
        assert np.array_equal(batched(getattr(tone, f"{name}_t"), flat), flat)


@pytest.mark.parametrize("h,w", [(224, 224), (37, 53)])
def test_one_image_and_a_batch_give_the_same_pixels(h, w):
    img = oracle.photo(1, h, w)
    cases = [(tone.autocontrast_np, tone.autocontrast_t, ()), (tone.equalize_np, tone.equalize_t, ())]
    cases += [(tone.posterize_np, tone.posterize_t, (bits,)) for bits in (0, 1, 4, 7)]
    cases += [(tone.solarize_np, tone.solarize_t, (t,)) for t in (0.0, 76.5, 128.0, 255.0, 256.0)]
    for one_fn, batch_fn, args in cases:
        want = batched(batch_fn, img, *[[a] for a in args])
        assert np.array_equal(one_fn(img, *args), want), (one_fn.__name__, args)


def test_solarize_add_and_invert_are_tables_of_the_values():
    values = np.arange(256, dtype=np.uint8).reshape(16, 16, 1).repeat(3, axis=2)
    added = tone.solarize_add_np(values, 110.0)[..., 0].ravel().astype(int)
    assert list(added[:128]) == list(range(110, 238)) and list(added[128:]) == list(range(128, 256))
    assert np.array_equal(tone.invert_np(values), 255 - values)
