"""Antialiased bilinear resampling of a region whose edges may fall between pixels:
torchvision's ``Resize`` (antialias=True, its default) and Pillow's ``resize(box=...)``.

Output pixel (y, x) of an H x W output from region (top, left, height, width) is centred on
(top + (y + 1/2) height / H, left + (x + 1/2) width / W) in image pixels, and is the average
of the image's pixels around that centre weighted by a triangle as wide as the shrink (one
pixel when enlarging: plain bilinear), the filter cut at the image's edges and its weights
summed to one. That is Pillow's resampling, which torch's ``interpolate(antialias=True)``
(torchvision on tensors) copies; so an evaluation crop (a region of a resized image, its
edges between source pixels) comes out as torchvision's Resize + CenterCrop, and a crop cut
out first as its ``resized_crop`` (RandomResizedCrop).

Two implementations of that one function, equal to one grey level: torch's when the region
lies on the grid of a resize of the image from its top-left corner (a cut-out crop, an
evaluation crop: pixel ``skip`` of that resize is the region's first), which is several
times faster; Pillow's otherwise (a region moved by a reduced-scale decode or a region
decode). Thread-safe; both release the GIL.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..core.errors import DecodeError

_GRID = 1e-7         # an edge this close (relative) to a grid point is on it
_NUDGE = 1 + 1e-12   # torch's output size is floor(input x factor): never one short through rounding


class Span(NamedTuple):
    """The pixels of one axis that the filter reads for a region of that axis."""

    first: int      # first pixel the filter reads
    stop: int       # one past the last
    skip: int       # on the grid: output pixels of a resize from pixel 0 that come before the region
    on_grid: bool


def reach(scale: float) -> float:
    """How far past a region's edge (image pixels) the filter reads when shrinking by ``scale``."""
    return max(scale, 1.0) + 1.0


def span(start: float, length: float, count: int, size: int) -> Span:
    """The pixels of an axis of ``size`` pixels that resampling [start, start + length) to
    ``count`` output pixels reads."""
    scale = length / count
    skip = round(start / scale)
    on_grid = abs(start - skip * scale) <= _GRID * max(scale, 1.0)
    stop = min(size, math.ceil(start + length + reach(scale)))
    return Span(max(0, math.floor(start - reach(scale))), stop, skip, on_grid)


def check_region(top: float, left: float, height: float, width: float, image_hw: tuple[int, int],
                 hint: str = "") -> None:
    """DecodeError unless the region is inside the image and not empty: the record's size
    column and its data disagree."""
    h, w = image_hw
    if not (height > 0 and width > 0 and top >= 0 and left >= 0 and top + height <= h + _GRID * h
            and left + width <= w + _GRID * w):
        raise DecodeError(f"crop {(top, left, height, width)} (top, left, height, width) is not inside the "
                          f"{h}x{w} image{hint}; does the record's size match its data?")


def resample_into(image: np.ndarray, top: float, left: float, height: float, width: float,
                  out: np.ndarray, flip: bool = False) -> None:
    """Resample region (top, left, height, width) of ``image`` (H x W x 3 uint8) into ``out``
    (an H x W x 3 uint8 view), mirrored if ``flip``; see the module docstring."""
    if not isinstance(out, np.ndarray) or out.dtype != np.uint8 or out.ndim != 3 or out.shape[2] != 3:
        raise TypeError(f"out must be an H x W x 3 uint8 numpy array, got "
                        f"{type(out).__name__} {getattr(out, 'dtype', '')} {getattr(out, 'shape', '')}")
    check_region(top, left, height, width, image.shape[:2])
    oh, ow = out.shape[:2]
    rows = span(top, height, oh, image.shape[0])
    cols = span(left, width, ow, image.shape[1])
    if rows.on_grid and cols.on_grid:
        _torch_into(image[:rows.stop, :cols.stop], height / oh, width / ow, rows.skip, cols.skip, out)
    else:
        region = image[rows.first:rows.stop, cols.first:cols.stop]
        _pillow_into(region, top - rows.first, left - cols.first, height, width, out)
    if flip:
        import cv2
        cv2.flip(out, 1, dst=out)   # in place: OpenCV's horizontal flip swaps pairs


def _torch_into(image: np.ndarray, scale_y: float, scale_x: float, skip_y: int, skip_x: int,
                out: np.ndarray) -> None:
    """torch's antialiased bilinear resize of ``image`` by 1 / scale from its corner, output
    rows skip_y .. and columns skip_x .. into ``out``. uint8 in and out: torch's own uint8
    kernel, the one torchvision's tensor Resize runs (``interpolate`` calls this operator)."""
    import torch
    resize = torch.ops.aten._upsample_bilinear2d_aa
    oh, ow = out.shape[:2]
    factor_y, factor_x = _NUDGE / scale_y, _NUDGE / scale_x
    size = [math.floor(image.shape[0] * factor_y), math.floor(image.shape[1] * factor_x)]
    pixels = image if image.flags.writeable else np.array(image)   # torch wants it writable
    source = torch.from_numpy(pixels).permute(2, 0, 1).unsqueeze(0)   # channels_last: the fast kernel
    target = torch.from_numpy(out).permute(2, 0, 1).unsqueeze(0)
    if size == [oh, ow] and skip_y == skip_x == 0 and out.flags.c_contiguous:
        # a cut-out crop into a whole row: written in place (the kernel's out= needs a
        # channels_last-contiguous target; a strided view goes through a copy)
        resize.out(source, size, False, factor_y, factor_x, out=target)
    else:
        target.copy_(resize(source, size, False, factor_y, factor_x)[..., skip_y:skip_y + oh, skip_x:skip_x + ow])


def _pillow_into(image: np.ndarray, top: float, left: float, height: float, width: float,
                 out: np.ndarray) -> None:
    from PIL import Image
    oh, ow = out.shape[:2]
    h, w = image.shape[:2]
    box = (max(left, 0.0), max(top, 0.0), min(left + width, w), min(top + height, h))
    resized = Image.fromarray(np.ascontiguousarray(image)).resize((ow, oh), Image.Resampling.BILINEAR, box=box)
    np.copyto(out, np.asarray(resized))
