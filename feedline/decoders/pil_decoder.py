"""PIL backend: the reference decode (``Image.open`` -> ``convert("RGB")``), slowest of the three."""
from __future__ import annotations

import io

import numpy as np
from PIL import Image

from ..core.errors import DecodeError
from .base import JPEG_SCALES, Box, Decoder, choose_scale, resize_scaled_into

# What PIL raises for data it cannot read: UnidentifiedImageError and truncation
# are OSError; some plugins raise ValueError or SyntaxError on malformed headers.
_PIL_ERRORS = (OSError, ValueError, SyntaxError, Image.DecompressionBombError)


class PilDecoder(Decoder):
    """Thread-safe: each call opens its own Image; Pillow releases the GIL while decoding.

    A truncated file is a DecodeError here (Pillow's default), where libjpeg-turbo
    returns the partial image.
    """

    name = "pil"

    def decode(self, data) -> np.ndarray:
        with _open(data) as im:
            return np.array(_rgb(im))  # a writable copy; np.asarray would be read-only

    def decode_into(self, data, box: Box, flip: bool, out: np.ndarray) -> None:
        with _open(data) as im:
            scale = (1, 1)
            if im.format == "JPEG":
                scale = choose_scale(box, out.shape[:2], JPEG_SCALES)
                if scale != (1, 1):
                    scale = _draft(im, scale[1])
            image = np.asarray(_rgb(im))
        resize_scaled_into(image, box, scale, out, flip)


def _open(data) -> Image.Image:
    try:
        return Image.open(io.BytesIO(data))
    except _PIL_ERRORS as exc:
        raise DecodeError(f"PIL cannot open it: {exc}") from None


def _rgb(im: Image.Image) -> Image.Image:
    try:
        return im.convert("RGB")  # decodes, then converts (L, CMYK, P, RGBA, I;16 -> RGB)
    except _PIL_ERRORS as exc:
        raise DecodeError(f"PIL cannot decode it: {exc}") from None


def _draft(im: Image.Image, denom: int) -> tuple[int, int]:
    """Ask libjpeg to decode at 1/``denom`` in the DCT domain; the scale it will use."""
    w, h = im.size
    # Pillow picks the largest of 1, 2, 4, 8 not above min(w // req_w, h // req_h),
    # which for these requests is exactly ``denom``.
    result = im.draft("RGB", (w // denom, h // denom))
    if result is None:
        return (1, 1)
    _, (_, _, box_w, _) = result  # (0, 0, w / scale, h / scale)
    return (1, round(w / box_w))
