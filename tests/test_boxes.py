"""Boxes through the crop, resize and flip, against two independent references: numbers worked
out by hand for each edge case, and a pixel-mask reference (paint the box, crop the mask, scale
it by whole factors, mirror it, measure what is left) over many crops of the augment module."""
from __future__ import annotations

import numpy as np
import pytest

from feedline.planning.augment import AugmentSpec, center_crop, plan
from feedline.dataset.box_geometry import boxes_to_batch, to_output, transform_boxes


def mask_reference(box, image_hw, crop, flip, size):
    """(output box or None, visible share) by painting pixels: exact for integer corners and
    outputs that are whole multiples of the crop."""
    H, W = image_hw
    top, left, h, w = crop
    x0, y0, x1, y1 = box
    mask = np.zeros((H + 40, W + 40), dtype=bool)        # room for boxes past the image's edges
    mask[y0 + 20:y1 + 20, x0 + 20:x1 + 20] = True
    inside = mask[top + 20:top + 20 + h, left + 20:left + 20 + w]
    fy, fx = size[0] // h, size[1] // w
    assert (fy * h, fx * w) == tuple(size)
    out = np.repeat(np.repeat(inside, fy, axis=0), fx, axis=1)
    if flip:
        out = out[:, ::-1]
    visible = inside.sum() / mask.sum()
    if not out.any():
        return None, visible
    rows, cols = np.flatnonzero(out.any(axis=1)), np.flatnonzero(out.any(axis=0))
    return (cols[0], rows[0], cols[-1] + 1, rows[-1] + 1), visible


# -- hand-worked cases: crop (top, left, height, width) = (10, 20, 40, 60) of a 100 x 100 image,
# output (80, 120): every length doubles.
CROP, SIZE = (10, 20, 40, 60), (80, 120)


@pytest.mark.parametrize("box, flip, expected", [
    ((30, 20, 50, 30), False, [20, 20, 60, 40]),        # wholly inside: (x - 20) * 2, (y - 10) * 2
    ((30, 20, 50, 30), True, [60, 20, 100, 40]),        # mirrored: 120 - x
    ((10, 20, 30, 30), False, [0, 20, 20, 40]),         # half past the left edge: clipped at 0
    ((70, 40, 90, 60), False, [100, 60, 120, 80]),      # a quarter inside, past right and bottom
    ((70, 40, 90, 60), True, [0, 60, 20, 80]),          # ... mirrored to the left edge
])
def test_hand_worked_boxes(box, flip, expected):
    out, keep = transform_boxes([box], CROP, flip, SIZE, min_visibility=0.25)
    assert keep.tolist() == [True]
    assert out.tolist() == [expected]


def test_visibility_thresholds_by_hand():
    box = (70, 40, 90, 60)   # 20 x 20, of which 10 x 10 inside the crop: a quarter visible
    _, visible = to_output([box], [CROP], [False], SIZE)
    assert visible.tolist() == [0.25]
    assert transform_boxes([box], CROP, False, SIZE, min_visibility=0.25)[1].tolist() == [True]
    assert transform_boxes([box], CROP, False, SIZE, min_visibility=0.26)[1].tolist() == [False]
    half_left = (10, 20, 30, 30)                        # 20 x 10, half inside
    assert transform_boxes([half_left], CROP, False, SIZE, min_visibility=0.6)[1].tolist() == [False]


@pytest.mark.parametrize("box", [(0, 0, 20, 10), (80, 0, 100, 100), (20, 50, 80, 60), (0, 60, 5, 70)])
def test_a_box_wholly_outside_the_crop_is_dropped_even_with_no_threshold(box):
    out, keep = transform_boxes([box], CROP, False, SIZE, min_visibility=0.0)
    assert keep.tolist() == [False] and out.shape == (0, 4)


def test_a_tiny_crop_scales_a_pixel_to_the_whole_output():
    # A 1 x 1 crop at (5, 7), output 64 x 32: the pixel's box fills it, a neighbour's is gone.
    out, keep = transform_boxes([(7, 5, 8, 6), (6, 5, 7, 6), (0, 0, 50, 50)], (5, 7, 1, 1), False, (64, 32), 0.0)
    assert keep.tolist() == [True, False, True]
    assert out.tolist() == [[0, 0, 32, 64], [0, 0, 32, 64]]
    # ... and with the threshold, the big box (1 pixel of 2,500 visible) is dropped.
    assert transform_boxes([(0, 0, 50, 50)], (5, 7, 1, 1), False, (64, 32))[1].tolist() == [False]


def test_a_box_of_no_area_is_dropped_and_a_bad_threshold_refused():
    assert transform_boxes([(30, 20, 30, 40)], CROP, False, SIZE, 0.0)[1].tolist() == [False]
    with pytest.raises(ValueError, match="min_box_visibility"):
        transform_boxes([(30, 20, 50, 30)], CROP, False, SIZE, 1.5)


# -- the mask reference over the crops augment makes --------------------------------------------

def cases(n: int = 400, seed: int = 3):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        H, W = int(rng.integers(8, 40)), int(rng.integers(8, 40))
        h, w = int(rng.integers(1, H + 1)), int(rng.integers(1, W + 1))
        crop = (int(rng.integers(0, H - h + 1)), int(rng.integers(0, W - w + 1)), h, w)
        x0, y0 = int(rng.integers(-10, W)), int(rng.integers(-10, H))
        box = (x0, y0, x0 + int(rng.integers(1, 20)), y0 + int(rng.integers(1, 20)))
        size = (h * int(rng.integers(1, 4)), w * int(rng.integers(1, 4)))
        yield box, (H, W), crop, bool(rng.integers(0, 2)), size


@pytest.mark.parametrize("min_visibility", [0.0, 0.25, 0.7])
def test_matches_the_mask_reference(min_visibility):
    partly = outside = flipped = 0
    for box, hw, crop, flip, size in cases():
        expected, visible = mask_reference(box, hw, crop, flip, size)
        out, keep = transform_boxes([box], crop, flip, size, min_visibility)
        stays = expected is not None and visible >= min_visibility
        assert keep.tolist() == [stays], (box, crop, flip, size)
        if stays:
            assert out[0].tolist() == list(expected), (box, crop, flip, size)
        partly += 0 < visible < 1
        outside += expected is None
        flipped += flip and stays
    assert partly > 30 and outside > 30 and flipped > 3   # every edge case was met


def test_through_augment_train_and_eval_crops():
    """Crops from augment.plan (RandomResizedCrop + flip) and center_crop, checked box by box
    against the continuous formula written out here."""
    H = np.array([480, 375, 500, 333]); W = np.array([640, 500, 375, 500])
    box = np.array([50.0, 60.0, 300.0, 320.0])
    for spec in (AugmentSpec(size=(224, 224), train=True), AugmentSpec(size=(160, 128), train=False)):
        crops, flips = plan(spec, seed=7, epoch=2, indices=np.arange(4), heights=H, widths=W)
        if not spec.train:
            assert (crops == center_crop(H, W, spec.size)).all()
        for crop, flip in zip(crops, flips, strict=True):
            top, left, h, w = crop.astype(float)
            oh, ow = spec.size
            x0, x1 = (np.clip(box[[0, 2]], left, left + w) - left) * ow / w
            y0, y1 = (np.clip(box[[1, 3]], top, top + h) - top) * oh / h
            if flip:
                x0, x1 = ow - x1, ow - x0
            out, keep = transform_boxes([box], crop, bool(flip), spec.size, 0.0)
            if keep[0]:
                np.testing.assert_allclose(out[0], [x0, y0, x1, y1], rtol=1e-6, atol=1e-4)
            else:
                assert x1 <= x0 or y1 <= y0


def test_a_batch_is_each_sample_padded_in_order():
    coords = np.array([[30, 20, 50, 30], [0, 0, 5, 5], [70, 40, 90, 60], [10, 20, 30, 30]], dtype=np.float32)
    classes = np.array([4, 5, 6, 7])
    offsets = np.array([0, 2, 2, 4])        # sample 0: two boxes, sample 1: none, sample 2: two
    crops = np.array([CROP, CROP, CROP])
    flips = np.array([False, True, True])
    boxes = np.full((3, 3, 4), 9.0, dtype=np.float32)
    out_classes = np.full((3, 3), 9)
    counts = np.full(3, 9)
    boxes_to_batch(coords, classes, offsets, crops, flips, SIZE, 0.25, boxes, out_classes, counts)
    assert counts.tolist() == [1, 0, 2]
    assert out_classes.tolist() == [[4, -1, -1], [-1, -1, -1], [6, 7, -1]]
    assert boxes[0].tolist() == [[20, 20, 60, 40], [0, 0, 0, 0], [0, 0, 0, 0]]
    assert boxes[1].tolist() == [[0, 0, 0, 0]] * 3
    for k, box in enumerate(coords[2:]):      # sample 2 is flipped: each as transform_boxes says
        assert boxes[2, k].tolist() == transform_boxes([box], CROP, True, SIZE)[0][0].tolist()
