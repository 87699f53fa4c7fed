"""Nearest sampling of a mask through a crop, resize and flip: worked by hand on quadrants,
and against torch's own nearest (which torchvision v2 uses for a Mask) for training crops and
for the evaluation crop (Resize then CenterCrop)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from masks_helpers import quadrant_mask

from feedline.planning.augment import center_crop
from feedline.decoders.base import Box
from feedline.dataset.mask_codec import MaskError, encode
from feedline.dataset.mask_sampling import resized_indices, sample_mask, source_indices, window_indices


def test_a_known_crop_and_flip_puts_each_quadrant_where_it_must_be():
    """80x60 (WxH) split at row 30 and column 40; crop rows 10..49, columns 20..59 (40x40) into
    20x20: output row i reads row 10 + 2i (top quadrants for i < 10), column j reads 20 + 2j,
    mirrored: 20 + 2(19 - j), left of 40 for j > 9. So top-right (2) is at the top left."""
    mask = quadrant_mask(60, 80, split=(30, 40))
    out = np.empty((20, 20), np.int64)
    sample_mask(encode(mask), Box(10, 20, 40, 40), True, out, 255)
    want = np.block([[np.full((10, 10), 2), np.full((10, 10), 1)], [np.full((10, 10), 4), np.full((10, 10), 3)]])
    assert np.array_equal(out, want)
    sample_mask(mask, Box(10, 20, 40, 40), False, out, 255)   # a decoded mask (a folder's PNG) alike
    assert np.array_equal(out, want[:, ::-1])


def test_an_upscaled_crop_repeats_source_pixels():
    """3 source columns to 7: floor(j * 3 / 7) = 0 0 0 1 1 2 2 (float32, as torch)."""
    assert resized_indices(5, 3, 7).tolist() == [5, 5, 5, 6, 6, 7, 7]
    assert resized_indices(0, 4, 2).tolist() == [0, 2]


@pytest.mark.parametrize("seed", range(4))
def test_training_crops_pick_what_torch_nearest_picks(seed):
    rng = np.random.default_rng(seed)
    for _ in range(200):
        n, out = int(rng.integers(1, 900)), int(rng.integers(1, 500))
        line = torch.arange(n, dtype=torch.float32).reshape(1, 1, 1, n)
        torch_picks = F.interpolate(line, size=(1, out), mode="nearest")[0, 0, 0].long().numpy()
        assert np.array_equal(resized_indices(0, n, out), torch_picks), (n, out)


@pytest.mark.parametrize("hw, size", [((375, 500), (224, 224)), ((500, 333), (224, 224)), ((97, 131), (64, 80)),
                                      ((1024, 2048), (512, 512)), ((300, 301), (97, 97))])
def test_the_evaluation_crop_picks_what_resize_then_center_crop_picks(hw, size):
    """torchvision: Resize(int(min(size) / 0.875)) of the mask, nearest, then CenterCrop(size)."""
    h, w = hw
    mask = np.random.default_rng(0).integers(0, 200, hw).astype(np.uint8)
    resized = int(min(size) / 0.875)
    nh, nw = (int(resized * h / w), resized) if w <= h else (resized, int(resized * w / h))
    big = F.interpolate(torch.from_numpy(mask)[None, None].float(), size=(nh, nw), mode="nearest")[0, 0].long()
    top, left = int(round((nh - size[0]) / 2.0)), int(round((nw - size[1]) / 2.0))
    want = big[top:top + size[0], left:left + size[1]].numpy()
    out = np.empty(size, np.int64)
    sample_mask(encode(mask), Box(*center_crop([h], [w], size)[0].tolist()), False, out, 255)
    assert np.array_equal(out, want)


def test_a_window_indices_by_hand():
    """A 10-pixel axis resized to 20, window of 4 from resized pixel 8: source floor(r / 2) = 4 4 5 5."""
    assert window_indices(4.0, 2.0, 10, 4).tolist() == [4, 4, 5, 5]


def test_a_crop_of_no_area_is_all_ignore_index():
    out = np.zeros((5, 6), np.int16)
    sample_mask(encode(quadrant_mask(8, 8)), Box(0, 0, 0, 0), False, out, -100)
    assert (out == -100).all()
    assert source_indices(Box(0, 0, 0, 4), (5, 6), (8, 8)) is None


def test_a_mask_of_another_size_than_its_image_is_refused():
    with pytest.raises(MaskError, match=r"the mask is 8x6 \(WxH\), its image 8x7"):
        sample_mask(encode(np.zeros((6, 8), np.uint8)), Box(0, 0, 6, 8), False, np.empty((4, 4), np.int64), 255,
                    image_hw=(7, 8))


def test_classes_a_narrow_dtype_cannot_hold_are_refused_not_wrapped():
    mask = np.full((4, 4), 40000, np.uint16)
    out = np.empty((4, 4), np.int16)
    with pytest.raises(MaskError, match="holds class 40000, which int16 cannot"):
        sample_mask(encode(mask), Box(0, 0, 4, 4), False, out, 255)
    sample_mask(encode(mask), Box(0, 0, 4, 4), False, np.empty((4, 4), np.int32), 255)   # int32 holds it
