"""TimmRandomErasing: timm's RandomErasing (timm.data.random_erasing), which erases a box of
the *normalized* image: with mode "const" to 0 (the mean colour), "rand" to one normal value
per channel, "pixel" (timm's training default, --remode pixel) to per-pixel normal noise; the
noise is N(0, 1) in normalized units, neither rounded nor clipped to pixel levels.

It runs among ``batch_transforms``, on the finished (normalized) batch of any engine and
device, per sample: the box as timm draws it (area uniform in min_area..max_area of the image,
log-uniform aspect ratio, up to ten tries, a uniform position); the box and the noise come
from the sample's own stream, the noise drawn on the host so every device gets the same.
"""
from __future__ import annotations

import numpy as np
import torch

from ..planning.augment import uniforms
from .base import TransformError, check_probability
from .erasing import erase_boxes
from .streams import generator, stream_of

MODES = ("const", "rand", "pixel")


class TimmRandomErasing:
    """timm's RandomErasing(probability, min_area, max_area, min_aspect, max_aspect, mode), one
    box per image (timm's count 1); for a batch normalized with mean and std."""

    DRAWS = 1 + 2 * 10 + 2  # apply, the box's tries, top and left

    def __init__(self, probability: float = 0.5, min_area: float = 0.02, max_area: float = 1 / 3,
                 min_aspect: float = 0.3, max_aspect: float | None = None, mode: str = "const"):
        name = type(self).__name__
        self.probability = check_probability(name, "probability", probability)
        if not 0 < min_area <= max_area <= 1:
            raise ValueError(f"{name}: need 0 < min_area <= max_area <= 1, got {min_area}, {max_area}")
        max_aspect = max_aspect or 1 / min_aspect
        if not 0 < min_aspect <= max_aspect:
            raise ValueError(f"{name}: need 0 < min_aspect <= max_aspect, got {min_aspect}, {max_aspect}")
        if mode not in MODES:
            raise ValueError(f"{name}: mode must be one of {', '.join(MODES)} (timm's), got {mode!r}")
        self.min_area, self.max_area = float(min_area), float(max_area)
        self.min_aspect, self.max_aspect = float(min_aspect), float(max_aspect)
        self.mode = mode
        self._occurrence = 0

    @property
    def stream(self) -> int:
        return stream_of(type(self).__name__, self._occurrence)

    def boxes(self, seed: int, epoch: int, indices, height: int, width: int) -> np.ndarray:
        """int64 (top, left, h, w) per sample; h = 0 where nothing is erased."""
        u = uniforms(seed, epoch, indices, self.DRAWS, self.stream)
        boxes = erase_boxes(u[:, 1:], height, width, (self.min_area, self.max_area),
                            (self.min_aspect, self.max_aspect))
        boxes[u[:, 0] >= self.probability, 2:] = 0
        return boxes

    def noise(self, seed: int, epoch: int, index: int, channels: int, h: int, w: int) -> np.ndarray:
        """The fill of one sample's box in normalized units: zeros, one normal per channel, or
        one per pixel, from the sample's own generator."""
        if self.mode == "const":
            return np.zeros((channels, 1, 1), np.float32)
        rng = generator(seed, epoch, index, self.stream)
        shape = (channels, h, w) if self.mode == "pixel" else (channels, 1, 1)
        return rng.standard_normal(shape, dtype=np.float32)

    def apply_batch(self, images: torch.Tensor, seed: int, epoch: int, indices) -> torch.Tensor:
        """In place on a normalized float N x C x H x W batch (any device, any memory format)."""
        if not images.is_floating_point():
            raise TransformError(f"{type(self).__name__} erases in normalized units and needs a float "
                                 f"batch, got {images.dtype}: normalize the output, or use RandomErasing "
                                 f"(pixel units) in transforms")
        n, c, height, width = images.shape
        for i, (top, left, h, w) in enumerate(self.boxes(seed, epoch, indices, height, width)):
            if h:
                fill = torch.from_numpy(self.noise(seed, epoch, int(indices[i]), c, int(h), int(w)))
                images[i, :, top:top + h, left:left + w] = fill.to(images.device, images.dtype)
        return images

    def erase_masks(self, masks: torch.Tensor, seed: int, epoch: int, indices, ignore_index: int) -> torch.Tensor:
        """In place on the batch's masks (N x H x W): each erased box is ``ignore_index``."""
        for i, (top, left, h, w) in enumerate(self.boxes(seed, epoch, indices, *masks.shape[-2:])):
            if h:
                masks[i, top:top + h, left:left + w] = ignore_index
        return masks

    def __call__(self, images, targets, *, seed: int, epoch: int, indices):
        return self.apply_batch(images, seed, epoch, indices), targets

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({args})"
