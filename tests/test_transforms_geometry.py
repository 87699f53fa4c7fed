"""transforms/geometry.py: rotate and the fill outside the image against PIL."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import oracles_transforms as oracle


from feedline.transforms.autoaugment import apply_op_np, apply_op_t


PHOTOS = [oracle.photo(i) for i in range(3)]


def batched(fn, img: np.ndarray, *args) -> np.ndarray:
    """Run a torch op on a batch of one built from ``img``; back to uint8 H x W x 3."""
    x = torch.from_numpy(img).permute(2, 0, 1)[None].float()
    out = fn(x, *args)
    assert out.dtype == torch.float32 and torch.equal(out, out.round())  # whole numbers
    return out[0].permute(1, 2, 0).numpy().astype(np.uint8)

def diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.astype(np.int64) - b.astype(np.int64))


@pytest.mark.parametrize("degrees", [27.0, -13.0, 135.0, -135.0])
def test_rotate_matches_pil_rotate_but_for_ties_on_diagonals(degrees):
    for img in PHOTOS:
        ref = oracle.apply_op(img, "Rotate", degrees)
        for out in (apply_op_np("Rotate", img, degrees, 0),
                    batched(lambda x: apply_op_t("Rotate", x, np.array([degrees]), 0), img)):
            assert (diff(out, ref).max(axis=2) > 1).mean() < 0.02
            assert diff(out, ref).mean() < 0.6
        assert diff(ref, img).mean() > 5


def test_geometric_ops_fill_outside_with_the_fill_colour():
    img, fill = PHOTOS[0], (10, 200, 30)
    ref = oracle.apply_op(img, "TranslateX", 25.0, fill)
    assert diff(apply_op_np("TranslateX", img, 25.0, fill), ref).max() == 0
    assert diff(batched(lambda x: apply_op_t("TranslateX", x, np.array([25.0]), fill), img), ref).max() == 0
    assert (ref[:, :25] == fill).all()
