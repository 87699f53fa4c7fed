"""ColorJitter and RandomGrayscale, as torchvision defines them: jitter factors uniform in
their ranges, the four adjustments applied in a random order per sample."""
from __future__ import annotations

import numpy as np
import torch

from . import color
from .base import Params, SampleOp, check_interval, check_probability

_NP = (color.brightness_np, color.contrast_np, color.saturation_np, color.hue_np)
_T = (color.brightness_t, color.contrast_t, color.saturation_t, color.hue_t)


def _factor_range(name: str, value, center: float, bound: tuple[float, float]):
    """torchvision's ColorJitter._check_input: a number v means [center - v, center + v]
    (clipped at 0 for the factors); None when the range leaves the image unchanged."""
    given = value
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"ColorJitter: {name} must be >= 0, got {value!r}")
        value = (max(center - value, 0.0) if center else -value, center + value)
    lo, hi = check_interval("ColorJitter", name, value, low=-float("inf"))
    if lo < bound[0] or hi > bound[1]:
        raise ValueError(f"ColorJitter: {name} must lie in [{bound[0]}, {bound[1]}], got {given!r}")
    return None if lo == hi == center else (lo, hi)


class ColorJitter(SampleOp):
    """torchvision's ColorJitter(brightness, contrast, saturation, hue)."""

    DRAWS = 8  # four factors, then four keys whose order is the order of the adjustments

    def __init__(self, brightness=0, contrast=0, saturation=0, hue=0):
        self.brightness = _factor_range("brightness", brightness, 1.0, (0.0, float("inf")))
        self.contrast = _factor_range("contrast", contrast, 1.0, (0.0, float("inf")))
        self.saturation = _factor_range("saturation", saturation, 1.0, (0.0, float("inf")))
        self.hue = _factor_range("hue", hue, 0.0, (-0.5, 0.5))

    def _ranges(self):
        return (self.brightness, self.contrast, self.saturation, self.hue)

    def params(self, u: np.ndarray) -> Params:
        factors = np.zeros((len(u), 4))
        for j, r in enumerate(self._ranges()):
            factors[:, j] = np.nan if r is None else r[0] + (r[1] - r[0]) * u[:, j]
        return {"factors": factors, "order": np.argsort(u[:, 4:], axis=1, kind="stable")}

    def apply_cpu(self, image: np.ndarray, p: dict) -> np.ndarray:
        for j in p["order"]:
            if not np.isnan(p["factors"][j]):
                image = _NP[j](image, float(p["factors"][j]))
        return image

    def apply_torch(self, images: torch.Tensor, params: Params) -> torch.Tensor:
        for position in range(4):
            for j in range(4):
                if self._ranges()[j] is None:
                    continue
                rows = np.flatnonzero(params["order"][:, position] == j)
                if len(rows):
                    sel = torch.as_tensor(rows, device=images.device)
                    images[sel] = _T[j](images[sel], params["factors"][rows, j])
        return images


class RandomGrayscale(SampleOp):
    """torchvision's RandomGrayscale(p): gray in all three channels with probability p."""

    DRAWS = 1

    def __init__(self, p: float = 0.1):
        self.p = check_probability("RandomGrayscale", "p", p)

    def params(self, u: np.ndarray) -> Params:
        return {"apply": u[:, 0] < self.p}

    def apply_cpu(self, image: np.ndarray, p: dict) -> np.ndarray:
        return color.grayscale_np(image) if p["apply"] else image

    def apply_torch(self, images: torch.Tensor, params: Params) -> torch.Tensor:
        mask = torch.as_tensor(params["apply"], device=images.device).reshape(-1, 1, 1, 1)
        return torch.where(mask, color.grayscale_t(images), images)
