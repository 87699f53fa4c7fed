"""A mask through a sample's crop, resize and flip, by nearest sampling: the class of each
output pixel is the class of one source pixel, never a blend.

Which source pixel is torchvision v2's choice for a ``Mask`` (its resize of masks is always
nearest: ``F.interpolate(mode="nearest")``, source index floor(i * in / out) in float32):

- a training crop (whole pixels: RandomResizedCrop's ``resized_crop``) is cut out, then
  resized: row i of the output is row top + floor(i * height / out_height) of the source;
- an evaluation crop (a region of the resized image, its edges between source pixels:
  Resize then CenterCrop) is a window of the whole mask resized: row i is row
  floor((corner + i) * source / resized) of the source, ``corner`` and ``resized`` the
  crop's place and the resized image's side, in resized pixels;
- a flip mirrors the columns afterwards.

A crop of no area (a record that could not be read) leaves only ``ignore_index``.
"""
from __future__ import annotations

import numpy as np

from .mask_codec import MaskError, decode, shape_of


def resized_indices(start: int, length: int, out: int) -> np.ndarray:
    """Source indices of an ``out``-long axis resized from ``length`` source pixels at ``start``,
    as torch's nearest: float32 scale, floor, at most the last pixel."""
    scale = np.float32(length) / np.float32(out)
    picks = np.floor(np.arange(out, dtype=np.float32) * scale).astype(np.int64)
    return start + np.minimum(picks, length - 1)


def window_indices(start: float, length: float, source: int, out: int) -> np.ndarray:
    """Source indices of an ``out``-long window of a ``source``-long axis resized: the window
    covers ``start .. start + length`` in source pixels (`feedline.planning.augment.center_crop`'s box)."""
    resized = max(1, int(round(source * out / length)))
    corner = int(round(start * resized / source))
    scale = np.float32(source) / np.float32(resized)
    picks = np.floor(np.arange(corner, corner + out, dtype=np.float32) * scale).astype(np.int64)
    return np.clip(picks, 0, source - 1)


def source_indices(box, out_hw: tuple[int, int], source_hw: tuple[int, int]) -> tuple[np.ndarray, np.ndarray] | None:
    """(rows, cols) of the source pixel of each output pixel, or None for a crop of no area.
    ``box``: (top, left, height, width); ints cut out, floats a window of the resized mask."""
    top, left, height, width = box
    if height <= 0 or width <= 0 or min(source_hw) <= 0:
        return None
    if all(isinstance(v, (int, np.integer)) for v in box):
        return resized_indices(int(top), int(height), out_hw[0]), resized_indices(int(left), int(width), out_hw[1])
    return (window_indices(float(top), float(height), source_hw[0], out_hw[0]),
            window_indices(float(left), float(width), source_hw[1], out_hw[1]))


def sample_mask(source, box, flip: bool, out: np.ndarray, ignore_index: int,
                image_hw: tuple[int, int] | None = None) -> None:
    """``out`` (H x W, any integer dtype) from a mask: stored bytes (only the rows the crop
    reads are inflated) or a decoded H x W array, through ``box`` and ``flip``. ``image_hw``:
    its image's (height, width), which the mask must have."""
    stored = not (isinstance(source, np.ndarray) and source.ndim == 2)   # bytes-like: a stored mask
    hw = tuple(shape_of(source)[:2] if stored else source.shape)
    if image_hw is not None and hw != tuple(image_hw) and min(image_hw) > 0:
        raise MaskError(f"the mask is {hw[1]}x{hw[0]} (WxH), its image {image_hw[1]}x{image_hw[0]}: a mask is "
                        "the size of its image")
    picks = source_indices(box, out.shape, hw)
    if picks is None:
        out.fill(ignore_index)
        return
    rows, cols = picks
    first, stop = int(rows[0]), int(rows[-1]) + 1
    if int(rows.max()) >= hw[0] or int(cols.max()) >= hw[1] or first < 0 or int(cols.min()) < 0:
        raise MaskError(f"the crop {tuple(box)} reaches outside the {hw[1]}x{hw[0]} (WxH) mask: the mask is "
                        "not the size of its image")
    block = decode(source, first, stop) if stored else source[first:stop]
    if flip:
        cols = cols[::-1]
    taken = block[rows - first][:, cols]
    check_fits(taken, out.dtype)
    out[...] = taken


def check_fits(values: np.ndarray, dtype) -> None:
    """MaskError when class indices of ``values`` (uint16) do not fit the delivered ``dtype``."""
    info = np.iinfo(dtype)
    if values.dtype.itemsize >= np.dtype(dtype).itemsize and values.size and int(values.max()) > info.max:
        raise MaskError(f"a mask holds class {int(values.max())}, which {np.dtype(dtype).name} cannot: ask for "
                        "masks as int64 (OutputSpec(mask_dtype=torch.int64))")
