"""transforms/timm_geometry.py: the sampling grid is the full float64 formula's, whichever
coordinate it computes on one row or column only; one image on the host and a batch give the
same pixels for every geometric op, level, sign and interpolation, the fill included."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import oracles_transforms as oracle
from feedline.transforms import TimmRandAugment
from feedline.transforms.timm_geometry import pil_matrix, sampling_grid, warp_batch, warp_image
from feedline.transforms.timm_policy import level_to_arg

OPS = ("Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")
FILL = (124, 116, 104)


def full_grid(matrix, h: int, w: int):
    """The grid written out on every pixel: (m0 x + m1 y) + m2 at the centres, 2 v / side - 1."""
    ys, xs = np.meshgrid(np.arange(h) + 0.5, np.arange(w) + 0.5, indexing="ij")
    m = np.asarray(matrix, dtype=np.float64)
    xin, yin = m[0] * xs + m[1] * ys + m[2], m[3] * xs + m[4] * ys + m[5]
    inside = (xin >= 0) & (xin < w) & (yin >= 0) & (yin < h)
    return np.stack([2 * xin / w - 1, 2 * yin / h - 1], -1).astype(np.float32), inside


def args(name: str, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return level_to_arg(name, rng.uniform(0, 10, n), rng.random(n) < 0.5)


@pytest.mark.parametrize("op", OPS)
def test_the_grid_is_the_full_formulas(op):
    for h, w in ((224, 224), (30, 41)):
        for v in args(op, 20):
            grid, inside = sampling_grid(pil_matrix(op, float(v), h, w), h, w)
            want_grid, want_inside = full_grid(pil_matrix(op, float(v), h, w), h, w)
            assert np.array_equal(grid, want_grid) and np.array_equal(inside, want_inside), (op, h, w, v)


@pytest.mark.parametrize("op", OPS)
def test_one_image_and_a_batch_give_the_same_pixels(op):
    for i, (h, w) in enumerate(((224, 224), (30, 41))):
        img = oracle.photo(i, h, w)
        values = args(op, 8, seed=i)
        modes = np.array(["bilinear", "bicubic"] * 4)
        x = torch.from_numpy(np.stack([img] * len(values))).permute(0, 3, 1, 2).float()
        batch = warp_batch(x, [pil_matrix(op, float(v), h, w) for v in values], modes, FILL)
        batch = batch.permute(0, 2, 3, 1).to(torch.uint8).numpy()
        for k, (v, mode) in enumerate(zip(values, modes)):
            one = warp_image(img, pil_matrix(op, float(v), h, w), mode, FILL)
            assert np.array_equal(one, batch[k]), (op, h, w, v, mode)
        assert (batch != img).any(axis=(1, 2, 3)).all()   # every op moved the pixels


def test_outside_the_image_is_the_fill():
    img = oracle.photo(0, 40, 50)
    out = warp_image(img, pil_matrix("TranslateXRel", 0.3, 40, 50), "bilinear", FILL)
    assert (out[:, -15:] == FILL).all() and not (out[:, :30] == FILL).all(axis=2).any()


def test_a_fill_must_be_whole_pixel_values():
    with pytest.raises(ValueError, match="whole numbers"):
        TimmRandAugment(img_mean=(124.5, 116, 104))
