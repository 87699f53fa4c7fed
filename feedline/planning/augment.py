"""Crop and flip parameters: pure functions of (seed, epoch, sample index).

Every random number comes from a counter-based hash of (seed, epoch, index, draw),
so the parameters of a sample never depend on thread count, rank count, batch
composition or resume point. All functions are vectorized over a batch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .size_schedule import as_size

_ATTEMPTS = 10  # torchvision's RandomResizedCrop tries 10 times before its fallback
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = x + _GOLDEN
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def uniforms(seed: int, epoch: int, indices, draws: int, stream: int = 0) -> np.ndarray:
    """(len(indices), draws) floats in [0, 1), each a hash of (seed, epoch, index, stream, draw)."""
    idx = np.asarray(indices, dtype=np.int64).astype(np.uint64).reshape(-1, 1)
    key = _splitmix64(np.array([seed & (2**64 - 1)], dtype=np.uint64))
    key = _splitmix64(key ^ np.uint64(epoch & (2**64 - 1)))
    key = _splitmix64(key ^ np.uint64(stream))
    counters = np.arange(draws, dtype=np.uint64).reshape(1, -1)
    with np.errstate(over="ignore"):
        bits = _splitmix64(_splitmix64(key ^ idx) + counters)
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


@dataclass(frozen=True)
class AugmentSpec:
    """What the workers do to each image. ``size`` is the output (height, width)."""

    size: tuple[int, int] = (224, 224)
    train: bool = False           # random crops and flips only when asked (timm's is_training)
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    crop_fraction: float = 0.875  # eval: resize the shorter side to size / 0.875, center crop
    flip: bool = True             # train only: horizontal flip with probability 1/2
    min_box_visibility: float = 0.25   # targets: boxes with less of their area in the crop are dropped
    ignore_index: int = 255       # masks: the class of pixels outside the image, erased or cut out

    def __post_init__(self):
        object.__setattr__(self, "size", as_size(self.size, "size"))
        if isinstance(self.ignore_index, bool) or not isinstance(self.ignore_index, int):
            raise ValueError(f"ignore_index must be an int (the masks' class for pixels outside the image, "
                             f"erased or cut out; 255 by default), got {self.ignore_index!r}")
        object.__setattr__(self, "scale", tuple(self.scale))
        object.__setattr__(self, "ratio", tuple(self.ratio))
        v = self.min_box_visibility
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
            raise ValueError(f"min_box_visibility must be a number in [0, 1] (the share of a box's area that "
                             f"must stay inside the crop), got {v!r}")
        if not 0 < self.scale[0] <= self.scale[1]:
            raise ValueError(f"scale must satisfy 0 < min <= max, got {self.scale}")
        if not 0 < self.ratio[0] <= self.ratio[1]:
            raise ValueError(f"ratio must satisfy 0 < min <= max, got {self.ratio}")
        if not 0 < self.crop_fraction <= 1:
            raise ValueError(f"crop_fraction must be in (0, 1], got {self.crop_fraction}")


def random_resized_crop(heights, widths, u: np.ndarray, scale=(0.08, 1.0),
                        ratio=(3 / 4, 4 / 3)) -> np.ndarray:
    """torchvision's RandomResizedCrop.get_params, vectorized; ``u`` holds 2 * 10 + 2
    uniforms per sample. Returns int64 boxes (top, left, height, width)."""
    H = np.asarray(heights, dtype=np.int64)
    W = np.asarray(widths, dtype=np.int64)
    area = (H * W).astype(np.float64)[:, None]
    target = area * (scale[0] + (scale[1] - scale[0]) * u[:, 0:_ATTEMPTS])
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    aspect = np.exp(log_lo + (log_hi - log_lo) * u[:, _ATTEMPTS:2 * _ATTEMPTS])
    w = np.round(np.sqrt(target * aspect)).astype(np.int64)
    h = np.round(np.sqrt(target / aspect)).astype(np.int64)
    ok = (w > 0) & (w <= W[:, None]) & (h > 0) & (h <= H[:, None])
    first = np.argmax(ok, axis=1)
    found = ok[np.arange(len(H)), first]
    rows = np.arange(len(H))
    bh, bw = h[rows, first], w[rows, first]

    # Fallback, as torchvision: the whole image, clamped to the ratio range, centered.
    in_ratio = W / np.maximum(H, 1)
    fw = np.where(in_ratio > ratio[1], np.round(H * ratio[1]), W)
    fh = np.where(in_ratio < ratio[0], np.round(W / ratio[0]), H)
    fw, fh = fw.astype(np.int64), fh.astype(np.int64)
    bh = np.where(found, bh, fh)
    bw = np.where(found, bw, fw)
    top = np.where(found, np.floor(u[:, -2] * (H - bh + 1)), (H - bh) // 2).astype(np.int64)
    left = np.where(found, np.floor(u[:, -1] * (W - bw + 1)), (W - bw) // 2).astype(np.int64)
    return np.stack([top, left, bh, bw], axis=1)


def center_crop(heights, widths, size: tuple[int, int], crop_fraction: float = 0.875) -> np.ndarray:
    """The source region that torchvision's Resize(int(min(size) / crop_fraction)) +
    CenterCrop(size) shows, in source pixels: float64 boxes (top, left, height, width) whose
    edges fall between pixels. Its arithmetic, exactly: the shorter side resized to R, the
    longer to int(R * long / short); the crop's corner at round((resized - size) / 2) resized
    pixels (round half to even); one resized pixel is source / resized source pixels on each
    axis. Where the crop is larger than the resized image (a non-square size; torchvision pads
    with zeros) it keeps that axis whole. An empty record (0 x 0) gets an empty box."""
    H = np.asarray(heights, dtype=np.int64)
    W = np.asarray(widths, dtype=np.int64)
    resized = int(min(size) / crop_fraction)
    short = np.maximum(np.minimum(H, W), 1)
    longer = np.floor((resized * np.maximum(H, W)) / short).astype(np.int64)   # Python's int(R * long / short)
    new_h = np.where(W <= H, longer, resized)
    new_w = np.where(W <= H, resized, longer)
    empty = (H <= 0) | (W <= 0)
    boxes = []
    for source, new, out in ((H, new_h, size[0]), (W, new_w, size[1])):
        crop = np.minimum(out, new)
        corner = np.round((new - crop) / 2.0)
        pixel = source / np.maximum(new, 1)   # source pixels per resized pixel
        boxes += [corner * pixel, crop * pixel]
    top, height, left, width = boxes
    return np.where(empty[:, None], 0.0, np.stack([top, left, height, width], axis=1))


def plan(spec: AugmentSpec, seed: int, epoch: int, indices, heights, widths):
    """Boxes (n, 4) and flips (n,) for the samples ``indices`` of ``epoch``: int64 boxes on whole
    pixels in training (RandomResizedCrop's), float64 ones in evaluation (`center_crop`)."""
    if not spec.train:
        boxes = center_crop(heights, widths, spec.size, spec.crop_fraction)
        return boxes, np.zeros(len(boxes), dtype=bool)
    u = uniforms(seed, epoch, indices, 2 * _ATTEMPTS + 3)
    boxes = random_resized_crop(heights, widths, u[:, :-1], spec.scale, spec.ratio)
    flips = (u[:, -1] < 0.5) if spec.flip else np.zeros(len(boxes), dtype=bool)
    return boxes, flips
