"""The Decoder interface: encoded bytes -> uint8 RGB image, and the helpers backends share."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Iterable, NamedTuple

import numpy as np

from ..errors import DecodeError

# The DCT-domain reductions worth taking: libjpeg-turbo has SIMD code for these
# (1/8 is the DC coefficient alone); the other k/8 scales run scalar code.
JPEG_SCALES: tuple[tuple[int, int], ...] = ((1, 2), (1, 4), (1, 8))


class Box(NamedTuple):
    """A crop in source-image pixels."""
    top: int
    left: int
    height: int
    width: int


class Decoder(ABC):
    """One backend. Implementations are thread-safe and release the GIL while decoding
    where their library allows, so that decode threads scale with cores."""

    name: str

    @abstractmethod
    def decode(self, data) -> np.ndarray:
        """The whole image as an H x W x 3 uint8 RGB array (gray images are replicated)."""

    def decode_into(self, data, box: Box, flip: bool, out: np.ndarray) -> None:
        """Decode, crop ``box``, resize to ``out``'s H x W, mirror if ``flip``, write into ``out``.

        ``out`` is an H x W x 3 uint8 view into a batch buffer. This default decodes the
        whole image; backends override it to decode less (e.g. DCT-domain scaling).
        """
        image = self.decode(data)
        resize_into(crop_scaled(image, box, (1, 1)), out, flip)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def resize_into(crop: np.ndarray, out: np.ndarray, flip: bool) -> None:
    """Resize an H x W x 3 crop into ``out`` and mirror it horizontally if asked.

    Bilinear unless the crop shrinks by 2x or more, where bilinear would alias and the
    area filter is used, as an antialiased resize does. Below 2x the two differ by less
    than JPEG noise while the area filter costs as much as the decode itself; decoders
    that scale in the DCT domain leave less than 2x for this step."""
    import cv2
    if not isinstance(out, np.ndarray) or out.dtype != np.uint8 or out.ndim != 3 or out.shape[2] != 3:
        raise TypeError(f"out must be an H x W x 3 uint8 numpy array, got "
                        f"{type(out).__name__} {getattr(out, 'dtype', '')} {getattr(out, 'shape', '')}")
    h, w = out.shape[:2]
    far = crop.shape[0] >= 2 * h or crop.shape[1] >= 2 * w
    if far and (crop.shape[0] < h or crop.shape[1] < w):
        # Shrinking one way and enlarging the other (a thin strip): OpenCV's area filter
        # works only when both shrink, so shrink the long way first, then enlarge.
        crop = cv2.resize(crop, (min(w, crop.shape[1]), min(h, crop.shape[0])), interpolation=cv2.INTER_AREA)
        far = False
    interpolation = cv2.INTER_AREA if far else cv2.INTER_LINEAR
    result = cv2.resize(crop, (w, h), dst=out, interpolation=interpolation)
    if result is not out:  # OpenCV could not write into this view: it returned a new array
        np.copyto(out, result)
    if flip:
        cv2.flip(out, 1, dst=out)  # in place: OpenCV's horizontal flip swaps pairs


def resize_scaled_into(image: np.ndarray, box: Box, scale: tuple[int, int], out: np.ndarray, flip: bool) -> None:
    """``resize_into`` for ``box`` (source pixels) of ``image``, the source decoded at ``scale``.

    At a reduced scale the box's edges fall between scaled pixels; rounding them would
    move the crop by up to half a scaled pixel, which on a photo shows as much as a
    one-pixel shift. So when the output is at most 2x smaller than the scaled crop (the
    usual case after a DCT-domain reduction), bilinear sampling follows the box exactly,
    by an affine warp; for stronger reductions the area filter on the rounded crop is used."""
    crop = crop_scaled(image, box, scale)   # also checks that the box is inside the image
    h, w = out.shape[:2]
    if scale == (1, 1) or crop.shape[0] >= 2 * h or crop.shape[1] >= 2 * w:
        resize_into(crop, out, flip)
        return
    import cv2
    if not isinstance(out, np.ndarray) or out.dtype != np.uint8 or out.ndim != 3 or out.shape[2] != 3:
        resize_into(crop, out, flip)   # raises the TypeError
    num, denom = scale
    sx, sy = box.width * num / denom / w, box.height * num / denom / h
    x0, y0 = box.left * num / denom, box.top * num / denom
    # Output pixel (x, y) samples the image at (x0 + (x + 1/2) sx - 1/2, y0 + (y + 1/2) sy - 1/2);
    # mirrored, column x samples where column w - 1 - x would.
    if flip:
        matrix = np.array([[-sx, 0, x0 + (w - 0.5) * sx - 0.5], [0, sy, y0 + 0.5 * sy - 0.5]])
    else:
        matrix = np.array([[sx, 0, x0 + 0.5 * sx - 0.5], [0, sy, y0 + 0.5 * sy - 0.5]])
    result = cv2.warpAffine(image, matrix, (w, h), dst=out, flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                            borderMode=cv2.BORDER_REPLICATE)
    if result is not out:
        np.copyto(out, result)


def is_jpeg(data) -> bool:
    """Whether ``data`` starts with a JPEG start-of-image marker (FF D8)."""
    return bytes(memoryview(data)[:2]) == b"\xff\xd8"


def choose_scale(box: Box, out_hw: tuple[int, int],
                 factors: Iterable[tuple[int, int]] = JPEG_SCALES) -> tuple[int, int]:
    """The strongest reduction ``(num, denom)`` among ``factors`` that keeps the scaled
    crop at least ``out_hw`` in both dimensions; ``(1, 1)`` when none does."""
    out_h, out_w = out_hw
    best = (1, 1)
    for num, denom in factors:
        if (num * box.height >= out_h * denom and num * box.width >= out_w * denom
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
