"""libjpeg-turbo backend through PyTurboJPEG 1.x: the fastest CPU decoder, with DCT-domain scaling."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
from ctypes import POINTER, byref, c_char_p, c_int, c_ulong, c_void_p

import numpy as np
import turbojpeg

from ..core.errors import BackendUnavailable, DecodeError
from . import jpeg_warnings
from .base import JPEG_SCALES, Box, Decoder, choose_scale, is_jpeg, resize_scaled_into

PIP_INSTALL = "pip install '.[turbojpeg]' from a clone of feedline, or pip install 'PyTurboJPEG<2'"
LIB_INSTALL = "brew install jpeg-turbo" if platform.system() == "Darwin" else "sudo apt-get install libturbojpeg0"
_NOT_RGB = (3, 4)              # TJCS_CMYK, TJCS_YCCK: libjpeg-turbo will not convert these to RGB
_TJFLAG_STOPONWARNING = 8192   # turbojpeg.h (libjpeg-turbo >= 2.0)
_TJERR_WARNING = 0             # tjGetErrorCode: the last failure was a warning, the image is complete


class TurbojpegDecoder(Decoder):
    """libjpeg-turbo decode straight to RGB (gray JPEGs come out replicated).

    Thread-safe: one TurboJPEG object serves every thread. It holds only ctypes
    function pointers; each decode creates and destroys its own libjpeg-turbo handle,
    and ctypes releases the GIL for each C call.

    Warnings policy: for a damaged JPEG (premature end of data, a corrupt segment)
    libjpeg-turbo emits a *warning* and still yields an image, partly gray. By default
    (``strict=True``) libturbojpeg is called directly with TJFLAG_STOPONWARNING and a
    warning that damages pixels is a DecodeError; after a benign one (`jpeg_warnings`) the
    image is decoded again past it. ``strict=False`` returns that image; PyTurboJPEG then reports
    the warning with ``warnings.warn`` (a UserWarning, shown once per message by Python's
    default filter), which a decode thread cannot catch per thread (``catch_warnings``
    swaps process-wide state). Fatal errors are a DecodeError in both modes. Data that is
    not a JPEG (no FF D8 start, e.g. PNG in a plain folder) and CMYK/YCCK JPEGs are
    decoded by OpenCV.

    ``fast_dct`` and ``fast_upsample`` trade a little accuracy for speed (libjpeg-turbo's
    TJFLAG_FASTDCT and TJFLAG_FASTUPSAMPLE). ``lib_path`` names libturbojpeg explicitly.
    """

    name = "turbojpeg"

    def __init__(self, fast_dct: bool = False, fast_upsample: bool = False, strict: bool = True,
                 lib_path: str | None = None):
        path = lib_path or find_libturbojpeg()
        self._tj = _load_pyturbojpeg(path)
        self.fast_dct, self.fast_upsample, self.strict = fast_dct, fast_upsample, strict
        self._flags = (turbojpeg.TJFLAG_FASTDCT if fast_dct else 0) | \
                      (turbojpeg.TJFLAG_FASTUPSAMPLE if fast_upsample else 0)
        self.scales = tuple(s for s in JPEG_SCALES if s in self._tj.scaling_factors)
        self._strict_lib = _StrictLibrary(path) if strict else None
        from .opencv_decoder import OpencvDecoder
        self._fallback = OpencvDecoder()

    def decode(self, data) -> np.ndarray:
        image = self._decode_jpeg(data, (1, 1)) if is_jpeg(data) else None
        return image if image is not None else self._fallback.decode(data)

    def decode_into(self, data, box: Box, flip: bool, out: np.ndarray) -> None:
        if is_jpeg(data):
            scale = choose_scale(box, out.shape[:2], self.scales)
            image = self._decode_jpeg(data, scale)
            if image is not None:
                resize_scaled_into(image, box, scale, out, flip)
                return
        self._fallback.decode_into(data, box, flip, out)

    def _decode_jpeg(self, data, scale: tuple[int, int]) -> np.ndarray | None:
        """The image decoded at ``scale``; None for a JPEG libjpeg-turbo cannot give as RGB."""
        if self._strict_lib is not None:
            return self._strict_lib.decode_rgb(data, scale, self._flags)
        try:
            image = self._tj.decode(data, turbojpeg.TJPF_RGB, None if scale == (1, 1) else scale, self._flags)
        except OSError as exc:
            if self._colorspace(data) in _NOT_RGB:
                return None
            raise DecodeError(f"libjpeg-turbo cannot decode it: {exc}") from None
        if image.size == 0:  # a header that only warned ("datastream contains no image")
            raise DecodeError("libjpeg-turbo finds no image in it (a JPEG start marker, then no frame)")
        return image

    def _colorspace(self, data) -> int | None:
        try:
            return self._tj.decode_header(data)[3]
        except OSError:
            return None

    def __repr__(self) -> str:
        return (f"TurbojpegDecoder(fast_dct={self.fast_dct}, fast_upsample={self.fast_upsample}, "
                f"strict={self.strict})")


def find_libturbojpeg() -> str:
    """The path of libturbojpeg, searched as PyTurboJPEG 1.x does, so that both load the same file."""
    found = ctypes.util.find_library("turbojpeg")
    if found:
        return found
    for path in getattr(turbojpeg, "DEFAULT_LIB_PATHS", {}).get(platform.system(), []):
        if os.path.exists(path):
            return path
    for folder in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        path = os.path.join(folder, "libturbojpeg.so.0")
        if folder and os.path.exists(path):
            return path
    raise BackendUnavailable(f"libturbojpeg not found: {LIB_INSTALL}")


def _load_pyturbojpeg(path: str) -> turbojpeg.TurboJPEG:
    version = getattr(turbojpeg, "__version__", "")
    if version.split(".")[0].isdigit() and int(version.split(".")[0]) >= 2:
        raise BackendUnavailable(f"PyTurboJPEG {version} is installed; feedline uses the 1.x API "
                                 f"(2.x also needs libjpeg-turbo >= 3.0): {PIP_INSTALL}")
    try:
        return turbojpeg.TurboJPEG(path)
    except (OSError, AttributeError) as exc:  # not loadable, or a library without the TurboJPEG API
        raise BackendUnavailable(f"libturbojpeg at {path} cannot be used ({exc}): {LIB_INSTALL}") from None


class _StrictLibrary:
    """Direct libturbojpeg calls whose status tells a warning from success, which
    PyTurboJPEG reports only through ``warnings.warn``. Same decode as PyTurboJPEG's:
    header, then tjDecompress2 to the scaled size, a fresh handle per call."""

    def __init__(self, path: str):
        lib = ctypes.CDLL(path)  # its own function objects: PyTurboJPEG's argtypes stay untouched
        if not hasattr(lib, "tjGetErrorStr2"):
            raise BackendUnavailable(f"strict decoding needs libjpeg-turbo >= 2.0; {path} is older: {LIB_INSTALL}")
        self._init = _function(lib.tjInitDecompress, c_void_p, [])
        self._destroy = _function(lib.tjDestroy, c_int, [c_void_p])
        self._error = _function(lib.tjGetErrorStr2, c_char_p, [c_void_p])
        self._error_code = _function(lib.tjGetErrorCode, c_int, [c_void_p])
        self._header = _function(lib.tjDecompressHeader3, c_int,
                                 [c_void_p, c_void_p, c_ulong] + [POINTER(c_int)] * 4)
        self._decompress = _function(lib.tjDecompress2, c_int,
                                     [c_void_p, c_void_p, c_ulong, c_void_p, c_int, c_int, c_int, c_int, c_int])

    def decode_rgb(self, data, scale: tuple[int, int], flags: int) -> np.ndarray | None:
        src = np.frombuffer(data, dtype=np.uint8)
        handle = self._init()
        if not handle:
            raise MemoryError("libjpeg-turbo could not create a decompressor")
        try:
            width, height, subsampling, colorspace = c_int(), c_int(), c_int(), c_int()
            if self._header(handle, src.ctypes.data, src.size, byref(width), byref(height),
                            byref(subsampling), byref(colorspace)) != 0 and not (
                    jpeg_warnings.is_benign(self._message(handle)) and width.value > 0 and height.value > 0):
                raise DecodeError(f"libjpeg-turbo cannot read the JPEG header: {self._message(handle)}")
            if colorspace.value in _NOT_RGB:
                return None
            num, denom = scale
            w, h = (width.value * num + denom - 1) // denom, (height.value * num + denom - 1) // denom
            image = np.empty((h, w, 3), dtype=np.uint8)
            if self._decompress(handle, src.ctypes.data, src.size, image.ctypes.data, w, 0, h,
                                turbojpeg.TJPF_RGB, flags | _TJFLAG_STOPONWARNING) != 0:
                message = self._message(handle)
                if not (jpeg_warnings.is_benign(message) and self._decode_past_warnings(handle, src, image, flags)):
                    raise DecodeError(f"libjpeg-turbo cannot decode it cleanly (strict): {message}")
                jpeg_warnings.note(message)
            return image
        finally:
            self._destroy(handle)

    def _decode_past_warnings(self, handle, src: np.ndarray, image: np.ndarray, flags: int) -> bool:
        """Decode into ``image`` again, going on after warnings; False on an error."""
        h, w = image.shape[:2]
        done = self._decompress(handle, src.ctypes.data, src.size, image.ctypes.data, w, 0, h,
                                turbojpeg.TJPF_RGB, flags)
        return done == 0 or self._error_code(handle) == _TJERR_WARNING

    def _message(self, handle) -> str:
        return self._error(handle).decode(errors="replace")


def _function(fn, restype, argtypes):
    fn.restype, fn.argtypes = restype, argtypes
    return fn
