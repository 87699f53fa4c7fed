import numpy as np
import pytest

from feedline.augment import AugmentSpec, center_crop, plan, random_resized_crop, uniforms


def test_uniforms_depend_only_on_seed_epoch_index():
    a = uniforms(1, 2, [5, 6, 7], 4)
    b = uniforms(1, 2, [7, 5], 4)
    assert np.array_equal(a[2], b[0]) and np.array_equal(a[0], b[1])
    assert not np.array_equal(uniforms(1, 3, [5], 4), uniforms(1, 2, [5], 4))
    u = uniforms(0, 0, np.arange(50000), 2)
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01


def test_random_resized_crop_boxes_are_inside_and_follow_the_distribution():
    n = 20000
    H, W = np.full(n, 375), np.full(n, 500)
    boxes, flips = plan(AugmentSpec(), seed=0, epoch=0, indices=np.arange(n), heights=H, widths=W)
    top, left, h, w = boxes.T
    assert (top >= 0).all() and (left >= 0).all() and (top + h <= H).all() and (left + w <= W).all()
    area = h * w / (375 * 500)
    assert area.min() >= 0.07 and area.max() <= 1.0
    ratio = w / h
    assert ratio.min() > 0.7 and ratio.max() < 1.4
    assert 0.45 < flips.mean() < 0.55


def test_random_resized_crop_fallback_for_extreme_shapes():
    # A 1000x10 strip: no attempt fits the ratio range, so torchvision's fallback applies.
    u = np.full((1, 22), 0.999)
    box = random_resized_crop([10], [1000], u, scale=(0.99, 1.0), ratio=(3 / 4, 4 / 3))[0]
    assert tuple(box) == (0, (1000 - 13) // 2, 10, 13)


def test_eval_geometry_matches_resize_then_center_crop():
    # torchvision: Resize(256) on 375x500 -> 256x341, CenterCrop(224): top 16, left 58 (in resized
    # pixels) -> a 328-pixel square in source pixels, centered.
    box = center_crop([375], [500], (224, 224), 0.875)[0]
    assert tuple(box) == (24, 86, 328, 328)
    boxes, flips = plan(AugmentSpec(train=False), 0, 0, [0, 1], [500, 224], [375, 224])
    assert tuple(boxes[0]) == (86, 24, 328, 328) and tuple(boxes[1]) == (14, 14, 196, 196)
    assert not flips.any()


def test_spec_validation():
    with pytest.raises(ValueError):
        AugmentSpec(size=0)
    with pytest.raises(ValueError):
        AugmentSpec(scale=(0.5, 0.1))
    assert AugmentSpec(size=(100, 50)).size == (100, 50)
