"""libjpeg-turbo through simplejpeg (a pip wheel that bundles it): strict decode, DCT scaling.

No system library. Used by the nvimgcodec backend for the decodes nvImageCodec cannot
do: a strict one (nvImageCodec's libjpeg-turbo ignores libjpeg's warnings) and one
at a reduced DCT scale (it has no scaling).
"""
from __future__ import annotations

import numpy as np
import simplejpeg

from ..core.errors import DecodeError
from . import jpeg_warnings
from .base import Box, Decoder, choose_scale, is_jpeg, resize_scaled_into

INSTALL = "pip install simplejpeg"
_NOT_RGB = ("CMYK", "YCCK")   # libjpeg-turbo does not convert these to RGB: OpenCV does


class SimplejpegDecoder(Decoder):
    """Decode straight to RGB (gray JPEGs come out replicated), at 1/2, 1/4 or 1/8 scale
    in the DCT domain when the crop is at least twice that much larger than the output
    (`choose_scale`).

    Strict by default: a libjpeg warning that damages pixels (corrupt data, premature end)
    is a DecodeError, not a partly gray image; a benign one (`jpeg_warnings`) is not. ``strict=False`` returns what libjpeg-turbo could decode.
    Data that is not a JPEG, CMYK/YCCK and 12-bit JPEGs go to OpenCV.
    Thread-safe: each call has its own libjpeg-turbo handle; simplejpeg releases the GIL.
    """

    name = "simplejpeg"

    def __init__(self, fast_dct: bool = False, fast_upsample: bool = False, strict: bool = True):
        self.fast_dct, self.fast_upsample, self.strict = fast_dct, fast_upsample, strict
        from .opencv_decoder import OpencvDecoder
        self._fallback = OpencvDecoder()

    def decode(self, data) -> np.ndarray:
        header = _rgb_header(data)
        if header is None:
            return self._fallback.decode(data)
        return self._decode(data, header, (1, 1))

    def decode_into(self, data, box: Box, flip: bool, out: np.ndarray) -> None:
        header = _rgb_header(data)
        if header is None:
            self._fallback.decode_into(data, box, flip, out)
            return
        scale = choose_scale(box, out.shape[:2])
        image = self._decode(data, header, scale)
        if image.shape[:2] != _scaled(header, scale):  # a tiny image, where 1/8 is as big as 1/4;
            # or OpenCV's full-size decode of a JPEG libjpeg-turbo has no code for
            image, scale = self._decode(data, header, (1, 1)), (1, 1)
        resize_scaled_into(image, box, scale, out, flip)

    def _decode(self, data, header: tuple[int, int], scale: tuple[int, int]) -> np.ndarray:
        # simplejpeg picks the smallest libjpeg-turbo scale whose output is at least
        # min_height x min_width: asking for the size at 1/denom gives exactly 1/denom.
        min_h, min_w = _scaled(header, scale) if scale != (1, 1) else (0, 0)
        try:
            return simplejpeg.decode_jpeg(data, "rgb", fastdct=self.fast_dct, fastupsample=self.fast_upsample,
                                          min_height=min_h, min_width=min_w, strict=self.strict)
        except ValueError as exc:
            if "precision" in str(exc):   # "Unsupported JPEG data precision 12": OpenCV's to try
                return self._fallback.decode(data)
            if self.strict and jpeg_warnings.is_benign(str(exc)):  # every pixel decodes: take them
                jpeg_warnings.note(str(exc))
                try:
                    return simplejpeg.decode_jpeg(data, "rgb", fastdct=self.fast_dct, fastupsample=self.fast_upsample,
                                                  min_height=min_h, min_width=min_w, strict=False)
                except ValueError:  # a warning in the header stops simplejpeg even when lenient
                    return self._fallback.decode(data)
            how = "cleanly (strict)" if self.strict else ""
            raise DecodeError(f"libjpeg-turbo (simplejpeg) cannot decode it {how}: {exc}".replace("  ", " ")) \
                from None

    def __repr__(self) -> str:
        return (f"SimplejpegDecoder(fast_dct={self.fast_dct}, fast_upsample={self.fast_upsample}, "
                f"strict={self.strict})")


def _rgb_header(data) -> tuple[int, int] | None:
    """(height, width) of a JPEG libjpeg-turbo decodes to RGB; None for anything else
    (not a JPEG, CMYK/YCCK, a header it rejects), which OpenCV then tries."""
    if not is_jpeg(data):
        return None
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError as exc:  # e.g. a 12-bit JPEG; OpenCV fails too when the header is damaged
        if not jpeg_warnings.is_benign(str(exc)):  # junk between segments: the decode sees it again
            return None
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data, strict=False)
    return None if colorspace in _NOT_RGB else (height, width)


def _scaled(header: tuple[int, int], scale: tuple[int, int]) -> tuple[int, int]:
    num, denom = scale
    return -(-header[0] * num // denom), -(-header[1] * num // denom)
