"""Decoding a crop of a grid store's record: splice the crop's MCUs, decode only those.

A grid store (``pack --layout grid``) holds JPEGs with a restart marker after every MCU
(see `jpeg_grid`). For a crop, ``GridDecoder`` splices the MCUs under it into a small
JPEG and decodes that with the SimplejpegDecoder (libjpeg-turbo, strict, at a reduced
DCT scale when the crop is at least four times the output, resized and flipped as every
decoder does; an evaluation crop, whose edges fall between pixels, with the pixels its resize
reads around it). Where a crop's edge lies near its MCU's edge the neighbouring MCU is spliced
along (`jpeg_grid.with_context`), so chroma upsampling and the resize see what a full decode
sees: the loader's crops are the original layout's to one level. Whole images go to the
wrapped decoder, once their grid is checked (`parse_grid`).
"""
from __future__ import annotations

import logging

import numpy as np

from ..core.errors import DecodeError
from .base import Box, Decoder, cuts_out, source_region
from .jpeg_grid import is_grid_store, parse_grid, splice_crop
from .resample import check_region
from .simplejpeg_decoder import SimplejpegDecoder

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
    """Crops of grid JPEGs spliced and decoded strictly by ``crops``, a SimplejpegDecoder:
    a damaging libjpeg warning on the spliced data, or a record that is not a valid grid,
    is a DecodeError (a bad record); a benign one (`jpeg_warnings`) is counted, as on
    every strict path. Thread-safe: no state but options; simplejpeg releases the GIL."""

    def __init__(self, whole: Decoder, fast_dct: bool = False, fast_upsample: bool = False):
        self.whole, self.fast_dct, self.fast_upsample = whole, fast_dct, fast_upsample
        self.name = whole.name   # the loader's decoder option: the backend behind the splice
        self.crops = SimplejpegDecoder(fast_dct, fast_upsample, strict=True)

    def decode(self, data) -> np.ndarray:
        parse_grid(data)   # a damaged grid is a bad record here too, not decoded whole after all
        return self.whole.decode(data)

    def decode_into(self, data, box: Box, flip: bool, out: np.ndarray) -> None:
        layout = parse_grid(data)
        if cuts_out(box):
            spliced, shifted, _ = splice_crop(data, box, layout)
        else:   # an evaluation crop: the MCUs under what its resize reads, the box at its exact place
            check_region(*box, (layout.height, layout.width))
            region = source_region(box, out.shape[:2], layout.height, layout.width)
            spliced, moved, _ = splice_crop(data, region, layout)
            shifted = Box(box.top - region.top + moved.top, box.left - region.left + moved.left,
                          box.height, box.width)
        try:
            self.crops.decode_into(spliced, shifted, flip, out)
        except DecodeError as exc:
            raise DecodeError(f"the spliced crop of a grid record does not decode cleanly: {exc}") from None

    def __repr__(self) -> str:
        return f"GridDecoder({self.whole!r}, fast_dct={self.fast_dct}, fast_upsample={self.fast_upsample})"
