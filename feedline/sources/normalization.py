"""From decoded uint8 pixels to what the consumer receives: (x / 255 - mean) / std in
the output's dtype and memory layout, or the uint8 pixels themselves when mean is None.

Two functions from the same constants: ``normalize_table``, the lookup table (uint8 level
-> value) a worker maps each sample through on the host (rows.py), while the sample it
decoded is still in cache; ``normalize_batch`` maps a whole batch with torch on any device
(the Finishers). DALI normalizes inside its own pipeline with ``pixel_mean_std``.
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from ..core.config import IMAGENET_MEAN, IMAGENET_STD, OutputSpec


def layout_of(output: OutputSpec) -> torch.memory_format:
    return torch.channels_last if output.channels_last else torch.contiguous_format


def pixel_mean_std(output: OutputSpec) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-channel mean and std on the 0..255 scale (float64): (x - mean) / std equals
    (x / 255 - output.mean) / output.std. None when the output is uint8 pixels."""
    if output.mean is None:
        return None
    return 255.0 * np.asarray(output.mean, dtype=np.float64), 255.0 * np.asarray(output.std, dtype=np.float64)


def normalize_table(mean, std) -> np.ndarray:
    """uint8 level -> (level / 255 - mean) / std per channel: float32 1 x 256 x 3, as cv2.LUT takes it."""
    levels = np.arange(256, dtype=np.float64)[:, None] / 255.0
    table = (levels - np.array(mean)) / np.array(std)
    return table.astype(np.float32).reshape(1, 256, 3)


@functools.lru_cache(maxsize=16)
def _scale_bias(mean: tuple, std: tuple, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, bias) on ``device`` with x * scale + bias == (x / 255 - mean) / std; made once
    per device, since making them is a host-to-device copy."""
    mean_t = torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1)
    std_t = torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1)
    scale, bias = (1.0 / (255.0 * std_t)).to(device), (-mean_t / std_t).to(device)
    if device.type == "cuda":  # cached for every stream: the copies must be done before any reads them
        torch.cuda.current_stream(device).synchronize()
    return scale, bias


def normalize_batch(images: torch.Tensor, output: OutputSpec) -> torch.Tensor:
    """The device's function: an N x C x H x W batch of pixel values (uint8, or float on the
    0..255 scale) -> a new tensor in the output's dtype and layout, normalized (computed in
    float32, then cast: bfloat16 loses no more than its own rounding). Never a view of
    ``images``."""
    layout = layout_of(output)
    if output.mean is None:
        if images.dtype == torch.uint8:
            return images.clone(memory_format=layout)
        return images.round().clamp_(0, 255).to(torch.uint8, memory_format=layout)
    scale, bias = _scale_bias(tuple(output.mean), tuple(output.std), images.device)
    y = torch.empty(images.shape, dtype=torch.float32, device=images.device, memory_format=layout)
    torch.mul(images, scale, out=y)
    y.add_(bias)
    dtype = output.dtype
    return y if dtype == torch.float32 else y.to(dtype)


def normalize(images: torch.Tensor, mean=IMAGENET_MEAN, std=IMAGENET_STD,
              dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``(x - mean) / std`` of an N x 3 x H x W batch, the normalization FeedLoader applies:
    for a loader with ``mean=None`` whose batch transforms (kornia's, say) want pixels on the
    0..1 scale, to run after them. ``images``: uint8 (0..255) or floating (0..1); ``mean`` and
    ``std`` on the 0..1 scale, as torchvision's. A new tensor, in the input's memory layout."""
    if images.dtype == torch.uint8:
        pixels = images
    elif images.is_floating_point():
        pixels = images.float() * 255.0
    else:
        raise TypeError(f"normalize takes uint8 (0..255) or floating (0..1) images, got {images.dtype}")
    if images.dim() != 4 or images.shape[1] != 3:
        raise ValueError(f"normalize takes an N x 3 x H x W batch, got shape {tuple(images.shape)}")
    channels_last = images.is_contiguous(memory_format=torch.channels_last) and not images.is_contiguous()
    return normalize_batch(pixels, OutputSpec(mean=mean, std=std, dtype=dtype, channels_last=channels_last))
