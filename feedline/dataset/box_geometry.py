"""Boxes follow the pixels: source-pixel boxes through a sample's crop, resize and flip.

The crop of `feedline.planning.augment` is a box (top, left, height, width) in source pixels: a
RandomResizedCrop in training, the source region of resize + center crop in evaluation. The
decoder resizes that region to the output (height, width), then mirrors it when the sample
is flipped. A box (x0, y0, x1, y1) in source pixels (edges, not pixel centres) goes the same
way: clipped to the crop, scaled by output / crop on each axis, mirrored (x -> width - x).
Its visibility is the part of its area inside the crop; boxes below ``min_visibility`` (and
boxes with nothing inside) are dropped. Pure numpy, vectorized over every box of a batch.
"""
from __future__ import annotations

import numpy as np

MIN_BOX_VISIBILITY = 0.25


def to_output(boxes, crops, flips, size) -> tuple[np.ndarray, np.ndarray]:
    """Each box (N, 4: x0, y0, x1, y1, source pixels) through its own crop (N, 4: top, left,
    height, width) and flip (N,), into an output of ``size`` (height, width). Returns the boxes
    clipped to the output, in output pixels (float32), and the share of each box's area that
    is inside the crop (float64, 0 for a box of no area)."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    c = np.asarray(crops, dtype=np.float64).reshape(-1, 4)
    flip = np.asarray(flips, dtype=bool).reshape(-1)
    top, left, ch, cw = c[:, 0], c[:, 1], c[:, 2], c[:, 3]
    x0, x1 = np.clip(b[:, 0], left, left + cw), np.clip(b[:, 2], left, left + cw)
    y0, y1 = np.clip(b[:, 1], top, top + ch), np.clip(b[:, 3], top, top + ch)
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    inside = np.maximum(x1 - x0, 0) * np.maximum(y1 - y0, 0)
    visible = np.divide(inside, area, out=np.zeros_like(area), where=area > 0)
    out_h, out_w = size
    with np.errstate(divide="ignore", invalid="ignore"):   # a crop of no area (a record that failed to
        sx, sy = out_w / cw, out_h / ch                     # read): nothing visible, its boxes dropped
        ox0, ox1 = (x0 - left) * sx, (x1 - left) * sx
        oy0, oy1 = (y0 - top) * sy, (y1 - top) * sy
    ox0, ox1 = np.where(flip, out_w - ox1, ox0), np.where(flip, out_w - ox0, ox1)
    return np.stack([ox0, oy0, ox1, oy1], axis=1).astype(np.float32), visible


def kept(visible: np.ndarray, min_visibility: float = MIN_BOX_VISIBILITY) -> np.ndarray:
    """Which boxes stay: some area inside the crop, and at least ``min_visibility`` of it."""
    if not 0 <= min_visibility <= 1:
        raise ValueError(f"min_box_visibility must be in [0, 1], got {min_visibility}")
    return (visible > 0) & (visible >= min_visibility)


def transform_boxes(boxes, crop, flip: bool, size, min_visibility: float = MIN_BOX_VISIBILITY):
    """One sample's boxes (N, 4) through its crop (top, left, height, width) and flip: the
    boxes that stay, in output pixels (K, 4), and which of the N stayed (bool (N,))."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    out, visible = to_output(b, np.broadcast_to(np.asarray(crop, dtype=np.float64), (len(b), 4)),
                             np.full(len(b), bool(flip)), size)
    keep = kept(visible, min_visibility)
    return out[keep], keep


def boxes_to_batch(coords, classes, offsets, crops, flips, size, min_visibility,
                   out_boxes: np.ndarray, out_classes: np.ndarray, out_counts: np.ndarray) -> None:
    """The boxes of a batch (a compact list: ``coords`` (M, 4), ``classes`` (M,), sample i's are
    ``offsets[i]:offsets[i + 1]``) into padded arrays: ``out_boxes`` (B, P, 4) in output pixels,
    ``out_classes`` (B, P), -1 where padding, ``out_counts`` (B,): the boxes kept, in order."""
    offsets = np.asarray(offsets, dtype=np.int64)
    n = len(offsets) - 1
    owner = np.repeat(np.arange(n), np.diff(offsets))
    crops, flips = np.asarray(crops).reshape(-1, 4), np.asarray(flips, dtype=bool).reshape(-1)
    out, visible = to_output(coords, crops[owner], flips[owner], size)
    keep = kept(visible, min_visibility)
    owner = owner[keep]
    counts = np.bincount(owner, minlength=n)
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    slot = np.arange(len(owner)) - starts[owner]
    out_boxes[...] = 0
    out_classes[...] = -1
    out_boxes[owner, slot] = out[keep]
    out_classes[owner, slot] = np.asarray(classes)[keep]
    out_counts[...] = counts
