"""RandomErasing, as torchvision defines it: with probability p, up to ten tries at a box of
area scale * H * W and log-uniform aspect ratio that fits strictly inside the image, filled
with ``value`` (pixel units 0..255: transforms run on uint8 pixels, before normalization).

``value="random"`` fills the box with per-pixel noise: torchvision's standard normal noise on
a tensor normalized with ``mean`` and ``std`` (ImageNet's by default; timm's mode "pixel"),
seen in pixel units, so 255 * (mean + std * z) rounded and clipped to 0..255. The noise of a
sample comes from its own key, drawn with its other parameters. timm's erasing, in
normalized units and unquantized (``--reprob``/``--remode``), is TimmRandomErasing.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..core.config import IMAGENET_MEAN, IMAGENET_STD
from .base import Params, SampleOp, check_interval, check_probability, to_u8

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
    """torchvision's RandomErasing(p, scale, ratio, value); value is one number or three in
    0..255, or "random" (noise; ``mean`` and ``std`` are the normalization it stands for)."""

    DRAWS = 1 + 2 * _TRIES + 2 + 1  # apply, the box's tries, top and left, the noise's key

    def __init__(self, p: float = 0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0,
                 mean=IMAGENET_MEAN, std=IMAGENET_STD):
        self.p = check_probability("RandomErasing", "p", p)
        self.scale = check_interval("RandomErasing", "scale", scale)
        if self.scale[1] > 1:
            raise ValueError(f"RandomErasing: scale must lie in 0..1, got {scale!r}")
        self.ratio = check_interval("RandomErasing", "ratio", ratio)
        if self.ratio[0] <= 0:
            raise ValueError(f"RandomErasing: ratio must be > 0, got {ratio!r}")
        fill = np.atleast_1d(np.asarray(value, dtype=object))
        self._random = isinstance(value, str) and value == "random"
        if not self._random and (fill.size not in (1, 3) or not all(
                isinstance(v, (int, float)) and 0 <= v <= 255 for v in fill)):
            raise ValueError(f"RandomErasing: value must be one number or three in 0..255 (pixel "
                             f"units: it erases uint8 pixels) or 'random', got {value!r}")
        self.value = value
        self.mean, self.std = tuple(mean), tuple(std)

    def noise(self, key, height: int, width: int) -> np.ndarray:
        """The uint8 height x width x 3 fill of value="random" for one sample's key."""
        z = np.random.Generator(np.random.Philox(int(key))).standard_normal((height, width, 3))
        z *= self.std   # 255 * (mean + std * z), in place
        z += self.mean
        z *= 255
        return to_u8(z)

    def params(self, u: np.ndarray) -> Params:
        return {"apply": u[:, 0] < self.p, "u": u[:, 1:-1],
                "key": (u[:, -1] * 2.0 ** 53).astype(np.uint64)}

    def _boxes(self, params, height, width) -> np.ndarray:
        boxes = erase_boxes(np.atleast_2d(params["u"]), height, width, self.scale, self.ratio)
        boxes[~np.atleast_1d(params["apply"]), 2:] = 0
        return boxes

    def apply_cpu(self, image: np.ndarray, p: dict) -> np.ndarray:
        if not p["apply"]:
            return image
        top, left, h, w = self._boxes(p, *image.shape[:2])[0]
        if h == 0:
            return image
        out = image.copy()
        if self._random:
            out[top:top + h, left:left + w] = self.noise(p["key"], h, w)
        else:
            out[top:top + h, left:left + w] = np.broadcast_to(np.asarray(self.value, np.uint8), (3,))
        return out

    def apply_mask(self, mask: np.ndarray, p: dict, ignore_index: int) -> np.ndarray:
        """The erased box is nobody's class: ``ignore_index``."""
        if not p["apply"]:
            return mask
        top, left, h, w = self._boxes(p, *mask.shape)[0]
        if h == 0:
            return mask
        out = mask.copy()
        out[top:top + h, left:left + w] = ignore_index
        return out

    def apply_torch(self, images: torch.Tensor, params: Params) -> torch.Tensor:
        n, _, height, width = images.shape
        boxes = self._boxes(params, height, width)
        if self._random:
            for i in np.flatnonzero(boxes[:, 2]):  # noise is drawn on the host, as the CPU path's
                top, left, h, w = boxes[i]
                fill = torch.from_numpy(self.noise(params["key"][i], h, w)).permute(2, 0, 1)
                images[i, :, top:top + h, left:left + w] = fill.to(images.device, images.dtype)
            return images
        b = torch.as_tensor(boxes, device=images.device)
        ys = torch.arange(height, device=images.device).reshape(1, -1, 1)
        xs = torch.arange(width, device=images.device).reshape(1, 1, -1)
        top, left, h, w = (b[:, k].reshape(-1, 1, 1) for k in range(4))
        inside = (ys >= top) & (ys < top + h) & (xs >= left) & (xs < left + w)
        value = torch.as_tensor(np.broadcast_to(np.asarray(self.value, np.float64), (3,)).copy(),
                                dtype=images.dtype, device=images.device).reshape(1, 3, 1, 1)
        return torch.where(inside[:, None], value, images)
