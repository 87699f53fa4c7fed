"""Crop and flip parameters against independent oracles (tests/oracles.py): torchvision's
documented RandomResizedCrop / Resize + CenterCrop written out in scalar Python, and the
statistics a random-resized crop must have (area, aspect, position, flip rate)."""
from __future__ import annotations

import numpy as np
import pytest

import oracles
from feedline.planning.augment import AugmentSpec, center_crop, plan, random_resized_crop, uniforms

# Shapes that reach every branch: landscape, portrait, square, tiny, and strips too thin
# for any attempt (torchvision's fallback, on either side of the ratio range).
SHAPES = [(375, 500), (500, 375), (224, 224), (1, 1), (2, 3), (7, 1), (10, 1000), (1000, 10),
          (60, 45), (33, 44), (480, 640), (1200, 90), (1, 2), (1, 3), (1, 4), (3, 1)]


def ks_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    grid = np.union1d(a, b)
    fa = np.searchsorted(np.sort(a), grid, side="right") / len(a)
    fb = np.searchsorted(np.sort(b), grid, side="right") / len(b)
    return float(np.abs(fa - fb).max())


# -- the uniforms: a scalar re-implementation of the documented hash ---------------------------

def test_uniforms_equal_the_scalar_hash_of_seed_epoch_index_stream_draw():
    cases = [(0, 0, [0, 1, 2]), (7, 3, [5, 2**40, 123456789]), (2**63 + 5, 2**33, [9]), (-1, -2, [4])]
    for seed, epoch, indices in cases:
        for stream in (0, oracles.SUBSTITUTE_STREAM):
            got = uniforms(seed, epoch, indices, 5, stream=stream)
            want = [[oracles.uniform(seed, epoch, i, d, stream) for d in range(5)] for i in indices]
            assert got.shape == (len(indices), 5)
            assert got.tolist() == want


def test_uniforms_depend_only_on_seed_epoch_index():
    a = uniforms(1, 2, [5, 6, 7], 4)
    b = uniforms(1, 2, [7, 5], 4)
    assert np.array_equal(a[2], b[0]) and np.array_equal(a[0], b[1])
    assert not np.array_equal(uniforms(1, 3, [5], 4), uniforms(1, 2, [5], 4))
    assert not np.array_equal(uniforms(2, 2, [5], 4), uniforms(1, 2, [5], 4))
    assert not np.array_equal(uniforms(1, 2, [5], 4, stream=1), uniforms(1, 2, [5], 4))
    u = uniforms(0, 0, np.arange(50000), 2)
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    # the deciles are equally full, and the two draws of a sample are uncorrelated
    counts = np.histogram(u[:, 0], bins=10, range=(0, 1))[0]
    assert np.all(np.abs(counts - 5000) < 300)
    assert abs(np.corrcoef(u[:, 0], u[:, 1])[0, 1]) < 0.02


# -- RandomResizedCrop: torchvision's get_params, line by line -------------------------------

@pytest.mark.parametrize("scale,ratio", [((0.08, 1.0), (3 / 4, 4 / 3)), ((0.5, 0.9), (0.5, 2.0)),
                                         ((0.99, 1.0), (1.0, 1.0)), ((0.2, 0.2), (2.0, 3.0))])
def test_random_resized_crop_equals_torchvision_get_params(scale, ratio):
    rng = np.random.default_rng(11)
    H = np.array([h for h, _ in SHAPES] * 40)
    W = np.array([w for _, w in SHAPES] * 40)
    u = rng.random((len(H), 22))
    u[::7] = 0.0   # the edges of the uniform range: smallest area, smallest ratio, top-left
    u[3::7] = np.nextafter(1.0, 0.0)
    got = random_resized_crop(H, W, u, scale, ratio)
    assert got.dtype == np.int64 and got.shape == (len(H), 4)
    want = [oracles.random_resized_crop(int(h), int(w), row, scale, ratio) for h, w, row in zip(H, W, u)]
    assert [tuple(b) for b in got.tolist()] == want


def test_training_plan_equals_the_oracle_for_every_sample():
    """Boxes and flips from (seed, epoch, index): the oracle's hash, crop and flip draw."""
    n = 600
    H = np.array([SHAPES[i % len(SHAPES)][0] for i in range(n)])
    W = np.array([SHAPES[i % len(SHAPES)][1] for i in range(n)])
    indices = np.arange(n) * 7919 + 3
    for seed, epoch in [(0, 0), (5, 9)]:
        boxes, flips = plan(AugmentSpec(train=True), seed, epoch, indices, H, W)
        assert flips.dtype == bool
        for k in range(n):
            box, flip = oracles.train_params(seed, epoch, int(indices[k]), int(H[k]), int(W[k]))
            assert tuple(boxes[k].tolist()) == box and bool(flips[k]) == flip, k


def test_plan_passes_scale_ratio_and_flip_through():
    spec = AugmentSpec(scale=(0.3, 0.6), ratio=(0.5, 0.9), flip=False, train=True)
    H, W = np.full(300, 400), np.full(300, 300)
    boxes, flips = plan(spec, 1, 2, np.arange(300), H, W)
    assert not flips.any()
    for k in range(300):
        box, _ = oracles.train_params(1, 2, k, 400, 300, scale=(0.3, 0.6), ratio=(0.5, 0.9))
        assert tuple(boxes[k].tolist()) == box


def test_sizes_as_stores_keep_them_int32_even_for_the_largest_jpeg():
    """Stores hold (height, width) as int32; the area of a 65535 x 65535 JPEG does not fit
    in int32, and the crop must still be torchvision's."""
    H = np.array([65535, 50000, 375], dtype=np.int32)
    W = np.array([65535, 60000, 500], dtype=np.int32)
    u = np.random.default_rng(5).random((3, 22))
    got = random_resized_crop(H, W, u)
    assert [tuple(b) for b in got.tolist()] == [
        oracles.random_resized_crop(int(h), int(w), row) for h, w, row in zip(H, W, u)]
    boxes = center_crop(H, W, (224, 224))
    assert boxes.tolist() == center_crop(H.astype(np.int64), W.astype(np.int64), (224, 224)).tolist()


@pytest.mark.parametrize("spec", [AugmentSpec(train=True), AugmentSpec(flip=False, train=True), AugmentSpec(train=False)],
                         ids=["train", "no-flip", "eval"])
def test_plans_are_int64_or_float64_boxes_and_bool_flips(spec):
    """The documented types, which the decoders branch on: a crop of ints is cut out, then
    resized (training); a region of floats is resampled from the image around it (evaluation)."""
    boxes, flips = plan(spec, 0, 0, [0, 1, 2], np.array([300, 40, 7], dtype=np.int32),
                        np.array([200, 90, 7], dtype=np.int32))
    assert boxes.dtype == (np.int64 if spec.train else np.float64) and boxes.shape == (3, 4)
    assert flips.dtype == np.bool_ and flips.shape == (3,)
    assert center_crop([300], [200], (32, 32)).dtype == np.float64


def test_random_resized_crop_fallback_for_extreme_shapes():
    # A 1000x10 strip: no attempt fits the ratio range, so torchvision's fallback applies.
    u = np.full((1, 22), 0.999)
    box = random_resized_crop([10], [1000], u, scale=(0.99, 1.0), ratio=(3 / 4, 4 / 3))[0]
    assert tuple(box) == (0, (1000 - 13) // 2, 10, 13)
    box = random_resized_crop([1000], [10], u, scale=(0.99, 1.0), ratio=(3 / 4, 4 / 3))[0]
    assert tuple(box) == ((1000 - 13) // 2, 0, 13, 10)
    # wider ratios than the image: the full width, height = width / min ratio, centered
    box = random_resized_crop([90], [100], u, scale=(1.0, 1.0), ratio=(2.0, 3.0))[0]
    assert tuple(box) == (20, 0, 50, 100)
    # the image's own ratio is in range: the whole image, whatever the position draws say
    box = random_resized_crop([90], [100], u, scale=(1.0, 1.0), ratio=(1.0, 1.2))[0]
    assert tuple(box) == (0, 0, 90, 100)
    # a 1 x 2 strip is wider than 4/3: one pixel (no attempt fits with the smallest ratio)
    u = np.zeros((1, 22))
    assert tuple(random_resized_crop([1], [2], u)[0]) == (0, 0, 1, 1)


# -- the distribution a random-resized crop must have ----------------------------------------

@pytest.fixture(scope="module")
def crops_375x500():
    n = 20000
    H, W = np.full(n, 375), np.full(n, 500)
    boxes, flips = plan(AugmentSpec(train=True), seed=0, epoch=0, indices=np.arange(n), heights=H, widths=W)
    return boxes, flips


def test_random_crops_stay_inside_the_image(crops_375x500):
    top, left, h, w = crops_375x500[0].T
    assert (top >= 0).all() and (left >= 0).all() and (h >= 1).all() and (w >= 1).all()
    assert (top + h <= 375).all() and (left + w <= 500).all()


def test_random_crop_area_follows_scale_0_08_to_1(crops_375x500):
    """The area fraction is uniform on [0.08, 1] before torchvision's rejection of crops that
    do not fit, so a crop that is always the whole image, or always small, fails here."""
    _, _, h, w = crops_375x500[0].T
    area = h * w / (375 * 500)
    assert area.min() >= 0.075 and area.max() <= 1.0
    assert (area >= 0.999).mean() < 0.01, "crops must not be the whole image"
    assert 0.40 < area.mean() < 0.47          # 0.435 for torchvision on 375x500
    assert (area < 0.2).mean() > 0.12 and (area > 0.7).mean() > 0.12
    rng = np.random.default_rng(3)
    reference = np.array([oracles.random_resized_crop(375, 500, rng.random(22)) for _ in range(20000)])
    assert ks_distance(area, reference[:, 2] * reference[:, 3] / (375 * 500)) < 0.025


def test_random_crop_aspect_is_log_uniform_over_ratio(crops_375x500):
    _, _, h, w = crops_375x500[0].T
    log_ratio = np.log(w / h)
    lo, hi = np.log(3 / 4), np.log(4 / 3)
    assert log_ratio.min() > lo - 0.05 and log_ratio.max() < hi + 0.05   # rounding to pixels
    # log-uniform: about a tenth of the crops in each tenth of [log 3/4, log 4/3]
    counts = np.histogram(log_ratio, bins=10, range=(lo, hi))[0] / len(log_ratio)
    assert counts.min() > 0.07 and counts.max() < 0.13
    assert abs(log_ratio.std() - (hi - lo) / np.sqrt(12)) < 0.02


def test_random_crop_positions_vary_uniformly(crops_375x500):
    """Where the crop lies is uniform over the places it fits: top / (H - h) and
    left / (W - w) spread over [0, 1], not fixed at a corner or the center."""
    top, left, h, w = crops_375x500[0].T
    room = (375 - h >= 20) & (500 - w >= 20)
    fy = top[room] / (375 - h[room])
    fx = left[room] / (500 - w[room])
    for f in (fy, fx):
        assert abs(f.mean() - 0.5) < 0.02 and abs(f.std() - np.sqrt(1 / 12)) < 0.02
        assert (f < 0.1).mean() > 0.07 and (f > 0.9).mean() > 0.07
    assert len(set(zip(top.tolist(), left.tolist()))) > 10000
    assert abs(np.corrcoef(fy, fx)[0, 1]) < 0.03


def test_flip_rate_is_one_half_and_independent_of_the_crop(crops_375x500):
    boxes, flips = crops_375x500
    assert abs(flips.mean() - 0.5) < 0.015
    top, left, h, w = boxes.T
    room = 500 - w >= 20
    fx = left[room] / (500 - w[room])
    assert abs(np.corrcoef(flips[room], fx)[0, 1]) < 0.03
    assert abs(np.corrcoef(flips, h * w)[0, 1]) < 0.03


def test_flip_probability_is_exactly_one_half_at_the_boundary():
    """The flip draw takes 2**53 equally likely values; exactly half of them (those below
    1/2) flip. A draw of exactly 1/2 does not flip; the one just below does."""
    flip_draw = oracles.TRAIN_DRAWS - 1
    for value, want in [(0.5, False), (0.5 - 2**-53, True), (0.0, True), (1 - 2**-53, False)]:
        index = oracles.index_whose_draw_is(3, 4, flip_draw, value)
        assert oracles.uniform(3, 4, index, flip_draw) == value
        assert uniforms(3, 4, [index], oracles.TRAIN_DRAWS)[0, flip_draw] == value
        _, flips = plan(AugmentSpec(train=True), 3, 4, [index], [100], [100])
        assert bool(flips[0]) is want and oracles.train_params(3, 4, index, 100, 100)[1] is want


def test_crops_change_with_epoch_and_seed_but_not_with_the_batch():
    H, W = np.full(500, 300), np.full(500, 400)
    idx = np.arange(500)
    a, fa = plan(AugmentSpec(train=True), 0, 0, idx, H, W)
    b, fb = plan(AugmentSpec(train=True), 0, 1, idx, H, W)
    c, fc = plan(AugmentSpec(train=True), 1, 0, idx, H, W)
    assert (a != b).any(axis=1).mean() > 0.95 and (a != c).any(axis=1).mean() > 0.95
    assert 0.3 < (fa != fb).mean() < 0.7 and 0.3 < (fa != fc).mean() < 0.7
    # one sample planned alone gets what it gets inside any batch
    single, sflip = plan(AugmentSpec(train=True), 0, 0, [123], [300], [400])
    assert single[0].tolist() == a[123].tolist() and sflip[0] == fa[123]


# -- evaluation: Resize(size / crop_fraction) + CenterCrop(size), no flips -------------------

EVAL_SHAPES = [(375, 500), (500, 375), (224, 224), (256, 256), (300, 1200), (1200, 300), (481, 640),
               (640, 427), (100, 101), (57, 300), (2000, 1999)]


@pytest.mark.parametrize("size,crop_fraction", [((224, 224), 0.875), ((32, 32), 1.0), ((160, 160), 0.95),
                                                ((64, 48), 0.75), ((48, 64), 0.75), ((50, 50), 0.5)])
def test_eval_boxes_are_the_region_torchvision_resize_and_center_crop_show(size, crop_fraction):
    """The source region torchvision shows, mapped back to source pixels, is feedline's box
    (to float rounding); where torchvision would pad, the box keeps that axis whole."""
    H = np.array([h for h, _ in EVAL_SHAPES])
    W = np.array([w for _, w in EVAL_SHAPES])
    boxes = center_crop(H, W, size, crop_fraction)
    checked = 0
    for (h, w), box in zip(EVAL_SHAPES, boxes.tolist()):
        region = oracles.eval_region(h, w, size, crop_fraction)
        if region is None:  # torchvision would pad: feedline keeps the whole extent instead
            assert (box[0] == 0 and box[2] == pytest.approx(h)) or (box[1] == 0 and box[3] == pytest.approx(w))
            continue
        assert box == pytest.approx(list(region[0]), rel=1e-12, abs=1e-9), (h, w)
        checked += 1
    assert checked >= len(EVAL_SHAPES) - 4


def test_eval_geometry_worked_example():
    # torchvision: Resize(256) on 375x500 -> 256x341 (int(256 * 500 / 375) = int(341.33)),
    # CenterCrop(224): top round(32 / 2) = 16, left round(117 / 2) = 58 (half to even), in resized
    # pixels; one resized pixel is 375 / 256 = 1.46484375 source pixels high, 500 / 341 wide.
    assert oracles.eval_geometry(375, 500, (224, 224), 0.875) == ((256, 341), (16, 58, 224, 224))
    box = center_crop([375], [500], (224, 224), 0.875)[0]
    assert box.tolist() == pytest.approx([16 * 375 / 256, 58 * 500 / 341, 224 * 375 / 256, 224 * 500 / 341])
    boxes, flips = plan(AugmentSpec(train=False), 0, 0, [0, 1], [500, 224], [375, 224])
    assert boxes[0].tolist() == pytest.approx([58 * 500 / 341, 16 * 375 / 256, 224 * 500 / 341, 224 * 375 / 256])
    # 224x224 -> 256x256, crop at 16: 14 source pixels in, 196 across
    assert boxes[1].tolist() == pytest.approx([14, 14, 196, 196])
    assert not flips.any()
    # a non-square output: 64 high, 48 wide from a 300x400 image resized to 64x85 (int(64 * 400 / 300)),
    # the crop's left at round(37 / 2) = 18 resized pixels of 400 / 85 source pixels
    assert center_crop([300], [400], (64, 48), 0.75)[0].tolist() == pytest.approx(
        [0, 18 * 400 / 85, 300, 48 * 400 / 85])
    # 450 -> 256 x int(256 * 451 / 450) = 256; 451 wide: (256 - 224) / 2 = 16 on both axes, and
    # a 301 x 257 image: 256 x int(256 * 301 / 257) = 299, left round(75 / 2) = 38 (half to even)
    assert center_crop([257], [301], (224, 224))[0][1] == pytest.approx(38 * 301 / 299)


def test_eval_ignores_seed_epoch_index_and_never_flips():
    spec = AugmentSpec(train=False, size=(96, 96))
    H, W = np.array([375, 500, 96]), np.array([500, 375, 96])
    first, flips = plan(spec, 0, 0, [0, 1, 2], H, W)
    assert first.tolist() == center_crop(H, W, (96, 96)).tolist() and not flips.any()
    for seed, epoch, idx in [(1, 0, [0, 1, 2]), (0, 7, [0, 1, 2]), (3, 3, [9, 8, 7])]:
        boxes, flips = plan(spec, seed, epoch, idx, H, W)
        assert boxes.tolist() == first.tolist() and not flips.any()


# -- the spec ---------------------------------------------------------------------------------

def test_spec_accepts_an_int_or_a_pair():
    assert AugmentSpec(size=(100, 50)).size == (100, 50)
    assert AugmentSpec(size=96).size == (96, 96)
    assert AugmentSpec(size=[1, 2]).size == (1, 2)
    assert AugmentSpec(scale=(0.5, 0.5), ratio=(1.0, 1.0), crop_fraction=1.0).crop_fraction == 1.0


@pytest.mark.parametrize("kwargs,words", [
    (dict(size=0), "size"), (dict(size=(0, 5)), "size"), (dict(size=(3, 4, 5)), "size"),
    (dict(scale=(0.5, 0.1)), "scale"), (dict(scale=(0.0, 0.5)), "scale"),
    (dict(ratio=(2.0, 1.0)), "ratio"), (dict(ratio=(0.0, 1.0)), "ratio"),
    (dict(crop_fraction=0.0), "crop_fraction"), (dict(crop_fraction=1.01), "crop_fraction")])
def test_spec_rejects_bad_values_and_names_the_option(kwargs, words):
    with pytest.raises(ValueError, match=words):
        AugmentSpec(**kwargs)
