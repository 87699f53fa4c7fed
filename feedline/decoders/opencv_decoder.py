"""OpenCV backend: ``cv2.imdecode`` for JPEG (its bundled libjpeg-turbo) and every other
format OpenCV reads (PNG, BMP, WebP, TIFF, ...)."""
from __future__ import annotations

import cv2
import numpy as np

from ..core.errors import DecodeError
from .base import JPEG_SCALES, Box, Decoder, choose_scale, is_jpeg, resize_scaled_into

# EXIF orientation is ignored, as libjpeg-turbo and PIL's plain decode do, so every
# backend agrees with the sizes column (read from the image header).
_IGNORE_ORIENTATION = cv2.IMREAD_IGNORE_ORIENTATION
# OpenCV >= 4.10 decodes straight to RGB; older versions need a channel swap.
_COLOR_RGB = getattr(cv2, "IMREAD_COLOR_RGB", None)
# For JPEG, the reduced modes decode in the DCT domain at 1/2, 1/4, 1/8 (scaled
# dimensions rounded up, as libjpeg does). They imply BGR: IMREAD_COLOR_RGB may not be added.
_REDUCED = {2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4, 8: cv2.IMREAD_REDUCED_COLOR_8}


class OpencvDecoder(Decoder):
    """Thread-safe: ``cv2.imdecode`` keeps no shared state and releases the GIL."""

    name = "opencv"

    def decode(self, data) -> np.ndarray:
        if _COLOR_RGB is not None:
            return _imdecode(data, _COLOR_RGB | _IGNORE_ORIENTATION)
        return _to_rgb(_imdecode(data, cv2.IMREAD_COLOR | _IGNORE_ORIENTATION))

    def decode_into(self, data, box: Box, flip: bool, out: np.ndarray) -> None:
        scale = choose_scale(box, out.shape[:2], JPEG_SCALES) if is_jpeg(data) else (1, 1)
        if scale == (1, 1):
            image = self.decode(data)
        else:
            image = _to_rgb(_imdecode(data, _REDUCED[scale[1]] | _IGNORE_ORIENTATION))
        resize_scaled_into(image, box, scale, out, flip)


def _imdecode(data, flags: int) -> np.ndarray:
    buf = np.frombuffer(data, dtype=np.uint8)
    if buf.size == 0:
        raise DecodeError("empty record: no image data")
    try:
        image = cv2.imdecode(buf, flags)
    except cv2.error as exc:
        raise DecodeError(f"OpenCV cannot decode it: {str(exc).strip()}") from None
    if image is None:
        raise DecodeError(f"OpenCV cannot decode it: corrupt, truncated or not an image "
                          f"({len(buf)} bytes starting {bytes(buf[:4]).hex(' ')})")
    return image


def _to_rgb(image: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB, dst=image)  # in place: the swap is per pixel
