"""Decoding a crop of a grid store's record: splice the crop's MCUs, decode only those.

A grid store (``pack --layout grid``) holds JPEGs with a restart marker after every MCU
(see `jpeg_grid`). For a crop, ``GridDecoder`` splices the MCUs under it into a small
JPEG and decodes that with libjpeg-turbo (simplejpeg), strictly and at a reduced DCT
scale when the crop is at least twice the output, then resizes and flips as every
decoder does (`resize_scaled_into`): the same pixels as a full decode's crop but for
chroma upsampling at the spliced edges. Whole images go to the wrapped decoder.
"""
from __future__ import annotations

import logging

import numpy as np
import simplejpeg

from ..errors import DecodeError
from .base import Box, Decoder, choose_scale, resize_scaled_into
from .jpeg_grid import is_grid_store, mcu_span, parse_grid, splice

log = logging.getLogger(__name__)

def grid_decoder_for(store, decoder: Decoder) -> Decoder:
    """``decoder`` itself, or on a grid store the GridDecoder that wraps it. A pure function
    of the store, so every run and every resume decodes the same way."""
    if not is_grid_store(store) or isinstance(decoder, GridDecoder):
        return decoder
    log.info("%s: a restart-marker grid store: decoding only each crop's MCUs (spliced), "
             "%s for whole images", getattr(store, "filename", "store"), decoder.name)
    return GridDecoder(decoder, fast_dct=getattr(decoder, "fast_dct", False),
                       fast_upsample=getattr(decoder, "fast_upsample", False))


class GridDecoder(Decoder):
    """Crops of grid JPEGs spliced and decoded strictly: a libjpeg warning on the spliced
    data, or a record that is not a valid grid, is a DecodeError (a bad record).
    Thread-safe: no state but options; simplejpeg releases the GIL while decoding."""

    def __init__(self, whole: Decoder, fast_dct: bool = False, fast_upsample: bool = False):
        self.whole, self.fast_dct, self.fast_upsample = whole, fast_dct, fast_upsample
        self.name = whole.name   # the loader's decoder option: the backend behind the splice

    def decode(self, data) -> np.ndarray:
        return self.whole.decode(data)

    def decode_into(self, data, box: Box, flip: bool, out: np.ndarray) -> None:
        box = Box(*map(int, box))   # plans hold numpy ints
        layout = parse_grid(data)
        r0, r1, c0, c1 = mcu_span(layout, *box)
        spliced = splice(data, layout, (r0, r1), (c0, c1))
        y0, x0 = r0 * layout.mcu_height, c0 * layout.mcu_width
        size = (min(r1 * layout.mcu_height, layout.height) - y0, min(c1 * layout.mcu_width, layout.width) - x0)
        shifted = Box(box.top - y0, box.left - x0, box.height, box.width)
        scale = choose_scale(shifted, out.shape[:2])
        image = self._decode(spliced, size, scale)
        if image.shape[:2] != _scaled(size, scale):   # a tiny crop, where 1/8 is as big as 1/4
            scale = (1, 1)
            image = self._decode(spliced, size, scale)
        resize_scaled_into(image, shifted, scale, out, flip)

    def _decode(self, spliced: bytes, size: tuple[int, int], scale: tuple[int, int]) -> np.ndarray:
        # simplejpeg picks the smallest scale whose output is at least min_height x min_width.
        min_h, min_w = _scaled(size, scale) if scale != (1, 1) else (0, 0)
        try:
            image = simplejpeg.decode_jpeg(spliced, "rgb", fastdct=self.fast_dct, fastupsample=self.fast_upsample,
                                           min_height=min_h, min_width=min_w, strict=True)
        except ValueError as exc:
            raise DecodeError(f"the spliced crop of a grid record does not decode cleanly (strict "
                              f"libjpeg-turbo): {exc}") from None
        if scale == (1, 1) and image.shape[:2] != size:
            raise DecodeError(f"the spliced crop decodes to {image.shape[1]}x{image.shape[0]}, "
                              f"its header says {size[1]}x{size[0]}")
        return image

    def __repr__(self) -> str:
        return f"GridDecoder({self.whole!r}, fast_dct={self.fast_dct}, fast_upsample={self.fast_upsample})"


def _scaled(size: tuple[int, int], scale: tuple[int, int]) -> tuple[int, int]:
    num, denom = scale
    return -(-size[0] * num // denom), -(-size[1] * num // denom)
