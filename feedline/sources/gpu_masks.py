"""Masks for the engines that make whole batches on a device (engine="gpu"): each record's
mask cut out on the host (nvImageCodec decodes no PNG, and a stored mask is deflate anyway:
only the crop's rows are inflated), then resized with nearest sampling and mirrored on the
device, as the CPU workers' `feedline.dataset.mask_sampling` does for a crop of whole pixels: the
same source pixel for each output pixel (torch's nearest is that rule itself).

Each record's crop and flip are its own, a pure function of (seed, epoch, index) as every
engine's (a substitute brings its own), on whole pixels as the GPU engine's images are.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..planning.augment import plan as plan_augment
from ..decoders.base import Box, whole_pixels
from ..dataset.mask_codec import decode, read_png
from .fill import MaskSpec


def mask_crop(store, spec: MaskSpec, index: int, box: Box) -> np.ndarray:
    """Record ``index``'s mask cut to ``box`` (whole pixels) on the host, as int32."""
    data = store.read_mask_checked(index)
    top, left, height, width = (int(v) for v in box)
    if spec.png:
        rows = read_png(data, f"{store.filename}: record {index} ({store.path(index)})'s mask")[top:top + height]
    else:
        rows = decode(data, top, top + height)
    return rows[:, left:left + width].astype(np.int32)


def resized_mask(crop: np.ndarray, size: tuple[int, int], flip: bool, device, dtype: torch.dtype,
                 ignore_index: int) -> torch.Tensor:
    """A cut-out mask (H' x W' class indices) resized to ``size`` with torch's nearest on
    ``device`` and mirrored when ``flip``: H x W in ``dtype``; ``ignore_index`` for a crop of no area."""
    if crop.size == 0:
        return torch.full(size, ignore_index, dtype=dtype, device=device)
    x = torch.from_numpy(crop).to(device, non_blocking=False).float()[None, None]   # classes are exact in float32
    out = F.interpolate(x, size=size, mode="nearest")[0, 0]
    return (out.flip(-1) if flip else out).to(dtype)


def batch_masks(store, spec: MaskSpec, decoded: np.ndarray, epoch, device, dtype: torch.dtype) -> torch.Tensor:
    """(N, H, W) masks of the records ``decoded`` (substitutes included) for ``epoch`` (an EpochPlan)."""
    idx = np.asarray(decoded, dtype=np.int64)
    hw = np.asarray(store.sizes)[idx].reshape(-1, 2)
    crops, flips = plan_augment(epoch.spec, epoch.seed, epoch.epoch, idx, hw[:, 0], hw[:, 1])
    size = tuple(epoch.spec.size)
    masks = torch.empty((len(idx), *size), dtype=dtype, device=device)
    for k, index in enumerate(idx.tolist()):
        crop = mask_crop(store, spec, index, whole_pixels(Box(*crops[k].tolist())))
        masks[k] = resized_mask(crop, size, bool(flips[k]), device, dtype, spec.ignore_index)
    return masks
