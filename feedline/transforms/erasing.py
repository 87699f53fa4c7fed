"""RandomErasing, as torchvision defines it: with probability p, up to ten tries at a box of
area scale * H * W and log-uniform aspect ratio that fits strictly inside the image, filled
with ``value`` (pixel units 0..255: transforms run on uint8 pixels, before normalization)."""
from __future__ import annotations

import math

import numpy as np
import torch

from .base import Params, SampleOp, check_interval, check_probability

_TRIES = 10


def erase_boxes(u: np.ndarray, height: int, width: int, scale, ratio) -> np.ndarray:
    """torchvision's RandomErasing.get_params, vectorized: ``u`` holds 2 * 10 + 2 uniforms per
    sample (areas, log ratios, top, left). Returns int64 (top, left, h, w); h = 0 for none."""
    area = height * width * (scale[0] + (scale[1] - scale[0]) * u[:, :_TRIES])
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    aspect = np.exp(lo + (hi - lo) * u[:, _TRIES:2 * _TRIES])
    h = np.round(np.sqrt(area * aspect)).astype(np.int64)
    w = np.round(np.sqrt(area / aspect)).astype(np.int64)
    ok = (h < height) & (w < width)
    first = np.argmax(ok, axis=1)
    rows = np.arange(len(u))
    found = ok[rows, first]
    bh = np.where(found, h[rows, first], 0)
    bw = np.where(found, w[rows, first], 0)
    top = np.where(found, np.floor(u[:, -2] * (height - bh + 1)), 0).astype(np.int64)
    left = np.where(found, np.floor(u[:, -1] * (width - bw + 1)), 0).astype(np.int64)
    return np.stack([top, left, bh, bw], axis=1)


class RandomErasing(SampleOp):
    """torchvision's RandomErasing(p, scale, ratio, value); value is one number or three."""

    DRAWS = 1 + 2 * _TRIES + 2

    def __init__(self, p: float = 0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0):
        self.p = check_probability("RandomErasing", "p", p)
        self.scale = check_interval("RandomErasing", "scale", scale)
        if self.scale[1] > 1:
            raise ValueError(f"RandomErasing: scale must lie in 0..1, got {scale!r}")
        self.ratio = check_interval("RandomErasing", "ratio", ratio)
        if self.ratio[0] <= 0:
            raise ValueError(f"RandomErasing: ratio must be > 0, got {ratio!r}")
        fill = np.atleast_1d(np.asarray(value, dtype=object))
        if fill.size not in (1, 3) or not all(isinstance(v, (int, float)) and 0 <= v <= 255 for v in fill):
            raise ValueError(f"RandomErasing: value must be one number or three in 0..255 (pixel "
                             f"units: it erases uint8 pixels), got {value!r}")
        self.value = value

    def params(self, u: np.ndarray) -> Params:
        return {"apply": u[:, 0] < self.p, "u": u[:, 1:]}

    def _boxes(self, params, height, width) -> np.ndarray:
        boxes = erase_boxes(np.atleast_2d(params["u"]), height, width, self.scale, self.ratio)
        boxes[~np.atleast_1d(params["apply"]), 2:] = 0
        return boxes

    def apply_cpu(self, image: np.ndarray, p: dict) -> np.ndarray:
        top, left, h, w = self._boxes(p, *image.shape[:2])[0]
        if h == 0:
            return image
        out = image.copy()
        out[top:top + h, left:left + w] = np.broadcast_to(np.asarray(self.value, np.uint8), (3,))
        return out

    def apply_torch(self, images: torch.Tensor, params: Params) -> torch.Tensor:
        n, _, height, width = images.shape
        b = torch.as_tensor(self._boxes(params, height, width), device=images.device)
        ys = torch.arange(height, device=images.device).reshape(1, -1, 1)
        xs = torch.arange(width, device=images.device).reshape(1, 1, -1)
        top, left, h, w = (b[:, k].reshape(-1, 1, 1) for k in range(4))
        inside = (ys >= top) & (ys < top + h) & (xs >= left) & (xs < left + w)
        value = torch.as_tensor(np.broadcast_to(np.asarray(self.value, np.float64), (3,)).copy(),
                                dtype=images.dtype, device=images.device).reshape(1, 3, 1, 1)
        return torch.where(inside[:, None], value, images)
