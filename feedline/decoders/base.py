"""The Decoder interface: encoded bytes -> uint8 RGB image, and the helpers backends share."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Iterable, NamedTuple

import numpy as np

from ..core.errors import DecodeError
from .resample import check_region, resample_into, span

# The DCT-domain reductions worth taking: libjpeg-turbo has SIMD code for these
# (1/8 is the DC coefficient alone); the other k/8 scales run scalar code.
JPEG_SCALES: tuple[tuple[int, int], ...] = ((1, 2), (1, 4), (1, 8))


class Box(NamedTuple):
    """A crop in source-image pixels. Ints: a crop cut out, then resized (torchvision's
    ``resized_crop``, RandomResizedCrop's: the resize's filter stops at the crop's edges).
    Floats: a region of a resized image, its edges often between pixels (Resize then
    CenterCrop, the evaluation crop: the filter reads the pixels around it)."""
    top: float
    left: float
    height: float
    width: float


class Decoder(ABC):
    """One backend. Implementations are thread-safe and release the GIL while decoding
    where their library allows, so that worker threads scale with cores."""

    name: str

    @abstractmethod
    def decode(self, data) -> np.ndarray:
        """The whole image as an H x W x 3 uint8 RGB array (gray images are replicated)."""

    def decode_into(self, data, box: Box, flip: bool, out: np.ndarray) -> None:
        """Decode, crop ``box``, resize to ``out``'s H x W, mirror if ``flip``, write into ``out``.

        ``out`` is an H x W x 3 uint8 view into a batch buffer. This default decodes the
        whole image; backends override it to decode less (e.g. DCT-domain scaling).
        """
        resize_scaled_into(self.decode(data), box, (1, 1), out, flip)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def resize_into(crop: np.ndarray, out: np.ndarray, flip: bool) -> None:
    """Resize a whole H x W x 3 crop into ``out`` and mirror it horizontally if asked: torchvision's
    antialiased bilinear resize (`resample`)."""
    resample_into(crop, 0, 0, crop.shape[0], crop.shape[1], out, flip)


def resize_scaled_into(image: np.ndarray, box: Box, scale: tuple[int, int], out: np.ndarray, flip: bool) -> None:
    """Resize ``box`` (source pixels) of ``image``, the source decoded at ``scale``, into ``out``,
    mirrored if ``flip``.

    A box of ints is cut out, then resized (`Box`); at a reduced scale its edges fall between
    the scaled pixels, and the scaled pixels that cover it are resampled at the box's exact
    place. A box of floats (an evaluation crop) is resampled from the image around it, as a
    resize of the whole image followed by a crop is (`resample`)."""
    num, denom = scale
    cut = cuts_out(box)
    if cut and scale == (1, 1):
        resize_into(crop_scaled(image, box, scale), out, flip)   # crop_scaled checks that it is inside
        return
    f = num / denom
    hint = "" if scale == (1, 1) else f" (decoded at scale {num}/{denom})"
    check_region(box.top * f, box.left * f, box.height * f, box.width * f, image.shape[:2], hint)
    if cut:   # the scaled pixels that cover the crop: the filter stops about at its edges
        top, left = box.top * num // denom, box.left * num // denom
        bottom, right = -(-(box.top + box.height) * num // denom), -(-(box.left + box.width) * num // denom)
        image = image[top:bottom, left:right]
        box = Box(box.top - top / f, box.left - left / f, box.height, box.width)
    resample_into(image, box.top * f, box.left * f, box.height * f, box.width * f, out, flip)


def cuts_out(box: Box) -> bool:
    """Whether ``box`` is a crop to cut out, then resize (ints: RandomResizedCrop's), rather
    than a region of the resized image (floats, even whole ones: the evaluation crop)."""
    return all(isinstance(v, (int, np.integer)) for v in box)


def whole_pixels(box: Box) -> Box:
    """The crop on whole pixels nearest ``box``: each edge rounded (decoders that cut crops
    out, such as the GPU's, given an evaluation crop whose edges fall between pixels)."""
    top, left = round(box.top), round(box.left)
    return Box(top, left, round(box.top + box.height) - top, round(box.left + box.width) - left)


def whole_pixel_boxes(boxes: np.ndarray) -> np.ndarray:
    """`whole_pixels` of each row of an (n, 4) array of boxes: int64 (n, 4)."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    corner = np.rint(b[:, :2])
    return np.concatenate([corner, np.rint(b[:, :2] + b[:, 2:]) - corner], axis=1).astype(np.int64)


def source_region(box: Box, out_hw: tuple[int, int], height: int, width: int) -> Box:
    """The whole-pixel region of a ``height`` x ``width`` image that resizing ``box`` into an
    output of ``out_hw`` reads: a box of ints itself, a box of floats widened by the filter's
    reach (clipped to the image). For decoders that decode a region only."""
    if cuts_out(box):
        return box
    rows = span(box.top, box.height, out_hw[0], height)
    cols = span(box.left, box.width, out_hw[1], width)
    return Box(rows.first, cols.first, rows.stop - rows.first, cols.stop - cols.first)


def is_jpeg(data) -> bool:
    """Whether ``data`` starts with a JPEG start-of-image marker (FF D8)."""
    return bytes(memoryview(data)[:2]) == b"\xff\xd8"


def choose_scale(box: Box, out_hw: tuple[int, int], factors: Iterable[tuple[int, int]] = JPEG_SCALES,
                 margin: int = 2) -> tuple[int, int]:
    """The strongest reduction ``(num, denom)`` among ``factors`` that keeps the scaled
    crop at least ``margin`` times ``out_hw`` in both dimensions; ``(1, 1)`` when none does.

    libjpeg's reduced-scale decode is a filter of its own, not torchvision's: with the
    default margin of 2 the antialiased resize that follows averages over two or more scaled
    pixels, which keeps the result within a fraction of a grey level of torchvision's
    resize of the full-size image (`bench/torchvision_pixels.py`); a margin of 1 would not."""
    out_h, out_w = out_hw
    best = (1, 1)
    for num, denom in factors:
        if (num * box.height >= margin * out_h * denom and num * box.width >= margin * out_w * denom
                and num * best[1] < best[0] * denom):
            best = (num, denom)
    return best


def crop_scaled(image: np.ndarray, box: Box, scale: tuple[int, int]) -> np.ndarray:
    """The view of ``image`` (the source decoded at ``scale`` = (num, denom)) that shows
    ``box`` (in source pixels).

    Edges are rounded to the nearest scaled pixel, so a box whose scaled size is at
    least n pixels gives a view of at least n pixels. A box outside the image, or
    empty, is a DecodeError: the record's size column and its data disagree.
    """
    num, denom = scale
    # floor(x + 1/2) in integers: x = v * num / denom.
    top, left = (2 * box.top * num + denom) // (2 * denom), (2 * box.left * num + denom) // (2 * denom)
    bottom = (2 * (box.top + box.height) * num + denom) // (2 * denom)
    right = (2 * (box.left + box.width) * num + denom) // (2 * denom)
    h, w = image.shape[:2]
    if box.height <= 0 or box.width <= 0 or box.top < 0 or box.left < 0 or bottom > h or right > w:
        hint = "" if scale == (1, 1) else f" (decoded at scale {num}/{denom})"
        raise DecodeError(f"crop {tuple(box)} (top, left, height, width) is not inside the "
                          f"{h}x{w} image{hint}; does the record's size match its data?")
    return image[top:bottom, left:right]
