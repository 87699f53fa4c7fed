"""NVIDIA nvImageCodec backend (CPU): decodes only the crop's region, no system library."""
from __future__ import annotations

import logging

import numpy as np

from ..core.errors import BackendUnavailable, DecodeError
from .base import Box, Decoder, choose_scale, cuts_out, is_jpeg, resize_scaled_into, source_region
from .resample import check_region
from .nvimgcodec_library import ThreadDecoders, load_nvimgcodec

log = logging.getLogger(__name__)
_nv = load_nvimgcodec()   # ImportError here tells the registry that nvImageCodec is missing
_EOI = b"\xff\xd9"
_EOI_WINDOW = 16 * 1024   # as the packer's header check: padding or a vendor trailer may follow EOI
_warned_lenient = False


class NvimgcodecDecoder(Decoder):
    """nvImageCodec's bundled libjpeg-turbo 3.1, with a partner for what it cannot do.

    Which library decodes a JPEG (bench/decoders.py measures each choice on photos):

    - ``strict=True`` (the default): the partner, a strict libjpeg-turbo decode
      (simplejpeg, else PyTurboJPEG with the system library), at a reduced DCT scale where
      the crop allows it; warnings that leave the pixels whole pass (`jpeg_warnings`). nvImageCodec's libjpeg-turbo cannot be strict: it ignores libjpeg's
      warnings, so damaged entropy-coded data ("Corrupt JPEG data") decodes silently into
      a wrong image, and a region decode never reads the data below the region. Detecting
      damage takes a full Huffman decode, which is most of a decode's cost even at 1/8
      scale, so no region decode plus check can beat the strict scaled decode, which runs
      as fast as a region decode on photos.
    - ``strict=False``: when the crop is at least 4x the output in both directions, the
      partner at 1/2, 1/4 or 1/8 scale (nvImageCodec has no scaling); otherwise an
      nvImageCodec decode of the crop's region alone. Somewhat faster than strict.
      A truncated JPEG is a DecodeError when the region reaches the missing rows.
    - Without a partner installed, nvImageCodec decodes every JPEG; in strict mode a
      JPEG without its end marker is then a DecodeError, but corrupt data inside is not
      detected (logged once, with what to install).

    Gray JPEGs come out as three equal channels. EXIF orientation is ignored, as by every
    backend, so images agree with the store's size column. Data that is not a JPEG, and
    JPEGs nvImageCodec's libjpeg-turbo cannot read (12-bit, lossless), go to OpenCV.

    Thread-safe: each thread gets its own nvImageCodec decoder (one shared by threads
    gives wrong images); the partner and OpenCV are thread-safe. All release the GIL.
    """

    name = "nvimgcodec"

    def __init__(self, strict: bool = True, fast_dct: bool = False):
        self.strict, self.fast_dct = strict, fast_dct
        self._params = _nv.DecodeParams(apply_exif_orientation=False, color_spec=_nv.SRGB)
        self._decoders = ThreadDecoders(":fast_idct=1" if fast_dct else "")
        self._partner = libjpeg_partner(strict, fast_dct)
        from .opencv_decoder import OpencvDecoder
        self._fallback = OpencvDecoder()
        if strict and self._partner is None:
            _warn_lenient()

    def decode(self, data) -> np.ndarray:
        if not is_jpeg(data):
            return self._fallback.decode(data)
        if self.strict and self._partner is not None:
            return self._partner.decode(data)
        return self._decode(data, None)

    def decode_into(self, data, box: Box, flip: bool, out: np.ndarray) -> None:
        if not is_jpeg(data):
            self._fallback.decode_into(data, box, flip, out)
        elif self._partner is not None and (self.strict or choose_scale(box, out.shape[:2]) != (1, 1)):
            self._partner.decode_into(data, box, flip, out)
        else:
            region = self._decode(data, box, out.shape[:2])
            if region is None:
                self._fallback.decode_into(data, box, flip, out)
            else:
                resize_scaled_into(*region, (1, 1), out, flip)

    def _decode(self, data, box: Box | None, out_hw: tuple[int, int] = (1, 1)):
        """The whole image of a JPEG, or (for a ``box``) the region that resizing it into
        ``out_hw`` reads (`source_region`) and the box within it; None for a JPEG that only
        OpenCV reads (12-bit or lossless)."""
        try:  # the header is parsed when first asked for
            stream = _nv.CodeStream(data)
            precision, h, w, channels = stream.precision, stream.height, stream.width, stream.num_channels
        except RuntimeError:  # nvImageCodec: "Failed to get image info"
            raise DecodeError("nvImageCodec cannot read its JPEG header (corrupt or cut short)") from None
        if precision != 8:
            return None if box is not None else self._fallback.decode(data)
        if box is not None:
            check_region(*box, (h, w))
            region = source_region(box, out_hw, h, w)
            stream = stream.get_sub_code_stream(region=_nv.Region(
                start=(int(region.top), int(region.left)),
                end=(int(region.top + region.height), int(region.left + region.width))))
        image = self._decoders.get().decode(stream, params=self._params)
        if image is None:
            if channels not in (1, 3, 4):
                return None if box is not None else self._fallback.decode(data)
            raise DecodeError("nvImageCodec cannot decode it: the JPEG data is cut short or corrupt")
        if self.strict and not _ends_with_eoi(data):
            raise DecodeError("the JPEG has no end-of-image marker: the file is cut short")
        pixels = np.asarray(image)  # a view that keeps the nvImageCodec image alive
        if box is None:
            return pixels
        if cuts_out(box):
            return pixels, Box(0, 0, int(box.height), int(box.width))
        return pixels, Box(box.top - region.top, box.left - region.left, box.height, box.width)

    def __repr__(self) -> str:
        partner = self._partner.name if self._partner is not None else None
        return f"NvimgcodecDecoder(strict={self.strict}, fast_dct={self.fast_dct}, partner={partner!r})"


def libjpeg_partner(strict: bool, fast_dct: bool) -> Decoder | None:
    """A libjpeg-turbo decoder with strict mode and DCT scaling: simplejpeg (pip only),
    else PyTurboJPEG with the system libturbojpeg; None when neither is installed."""
    try:
        from .simplejpeg_decoder import SimplejpegDecoder
        return SimplejpegDecoder(fast_dct=fast_dct, strict=strict)
    except ImportError:
        pass
    try:
        from .turbojpeg_decoder import TurbojpegDecoder
        return TurbojpegDecoder(fast_dct=fast_dct, strict=strict)
    except (ImportError, BackendUnavailable):
        return None


def _ends_with_eoi(data) -> bool:
    view = memoryview(data)
    return bytes(view[-2:]) == _EOI or _EOI in bytes(view[-_EOI_WINDOW:])


def _warn_lenient() -> None:
    global _warned_lenient
    if not _warned_lenient:
        _warned_lenient = True
        log.warning("decoder 'nvimgcodec': no strict libjpeg-turbo decoder is installed, so JPEGs with "
                    "corrupt data inside decode without an error (a cut-short file is still an error); "
                    "for strict decoding: pip install simplejpeg")
