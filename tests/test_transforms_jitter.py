"""transforms/jitter.py: ColorJitter's factors and order, RandomGrayscale's probability."""
from __future__ import annotations

from draws_helpers import CHI2_999
from draws_helpers import INDICES
from draws_helpers import chi_square
import math
from itertools import permutations
import numpy as np
import pytest


import torch
import oracles_transforms as oracle
from feedline.transforms import ColorJitter


PHOTOS = [oracle.photo(i) for i in range(3)]


def batched(fn, img: np.ndarray, *args) -> np.ndarray:
    """Run a torch op on a batch of one built from ``img``; back to uint8 H x W x 3."""
    x = torch.from_numpy(img).permute(2, 0, 1)[None].float()
    out = fn(x, *args)
    assert out.dtype == torch.float32 and torch.equal(out, out.round())  # whole numbers
    return out[0].permute(1, 2, 0).numpy().astype(np.uint8)

def diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.astype(np.int64) - b.astype(np.int64))


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


def test_color_jitter_factors_are_uniform_in_range_and_orders_uniform():
    op = ColorJitter(brightness=0.4, contrast=(0.5, 0.9), saturation=0, hue=0.1)
    p = op.draw(3, 2, INDICES)
    b, c, s, h = p["factors"].T
    assert op.saturation is None and np.isnan(s).all()
    for values, (lo, hi) in ((b, (0.6, 1.4)), (c, (0.5, 0.9)), (h, (-0.1, 0.1))):
        assert lo <= values.min() and values.max() <= hi
        assert abs(values.mean() - (lo + hi) / 2) < 0.01 * (hi - lo)
        assert abs(values.std() - (hi - lo) / math.sqrt(12)) < 0.01 * (hi - lo)
    perms = {perm: i for i, perm in enumerate(permutations(range(4)))}
    counts = np.bincount([perms[tuple(o)] for o in p["order"]], minlength=24)
    assert chi_square(counts) < CHI2_999[23]


@pytest.mark.parametrize("column,name", [(0, "brightness"), (1, "contrast"), (2, "saturation")])
def test_color_jitter_factors_above_one_span_zero_to_one_plus_the_value(column, name):
    """torchvision: a number v means [max(1 - v, 0), 1 + v], so ColorJitter(1.5) draws its
    brightness from (0, 2.5), not a range cut at 1 or at 2."""
    op = ColorJitter(**{name: 1.5})
    assert getattr(op, name) == (0.0, 2.5)
    values = op.draw(3, 0, INDICES)["factors"][:, column]
    assert 0 <= values.min() < 0.01 and 2.49 < values.max() <= 2.5
    assert abs(values.mean() - 1.25) < 0.03
