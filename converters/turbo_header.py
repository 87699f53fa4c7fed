"""libjpeg-turbo's tjDecompressHeader3 through ctypes, one handle per thread.

PyTurboJPEG's ``decode_header`` creates and destroys a decompressor on every call,
which costs more than reading the header when a pack checks thousands of files;
here each thread keeps its handle. Without the system libturbojpeg (it is optional),
the same answer comes from nvImageCodec's header parser and the JPEG's markers
(`NvimgcodecHeader`): neither needs a system library nor PyTurboJPEG.
"""
from __future__ import annotations

import ctypes
import threading
import weakref

_TJERR_WARNING = 0


def _load_library() -> ctypes.CDLL | None:
    """libturbojpeg by its usual name first, else by ctypes' search (which runs `ldconfig -p`:
    milliseconds that every pack's start-up would pay); None when missing. PyDLL keeps the
    GIL through the call: reading a header takes a microsecond or two, less than handing the
    GIL to another thread and taking it back."""
    try:
        return ctypes.PyDLL("libturbojpeg.so.0")
    except OSError:
        pass
    from ctypes.util import find_library
    path = find_library("turbojpeg")
    try:
        return ctypes.PyDLL(path) if path else None
    except OSError:
        return None


class _Handle:
    """A thread's tjhandle and output integers, destroyed when the thread ends."""

    def __init__(self, lib: ctypes.CDLL):
        self.value = lib.tjInitDecompress()
        if not self.value:
            raise OSError("libjpeg-turbo: tjInitDecompress failed")
        self.out = tuple(ctypes.c_int() for _ in range(4))  # width, height, subsampling, colorspace
        self.refs = tuple(ctypes.byref(v) for v in self.out)
        weakref.finalize(self, lib.tjDestroy, self.value)


class TurboHeader:
    """Callable: JPEG bytes -> (width, height, subsampling, colorspace), as libjpeg-turbo's
    TJSAMP_* and TJCS_* values; OSError when the header is rejected. Thread-safe."""

    def __init__(self):
        self._local = threading.local()
        self._lib = None
        self._fallback = None
        lib = _load_library()
        if lib is None or not hasattr(lib, "tjDecompressHeader3"):
            self._fallback = NvimgcodecHeader()
            return
        lib.tjInitDecompress.restype = ctypes.c_void_p
        lib.tjDestroy.argtypes = [ctypes.c_void_p]
        int_p = ctypes.POINTER(ctypes.c_int)
        lib.tjDecompressHeader3.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_ulong,
                                            int_p, int_p, int_p, int_p]
        lib.tjDecompressHeader3.restype = ctypes.c_int
        lib.tjGetErrorStr2.argtypes = [ctypes.c_void_p]
        lib.tjGetErrorStr2.restype = ctypes.c_char_p
        lib.tjGetErrorCode.argtypes = [ctypes.c_void_p]
        lib.tjGetErrorCode.restype = ctypes.c_int
        self._lib = lib

    def __call__(self, data: bytes) -> tuple[int, int, int, int]:
        if self._fallback is not None:
            return self._fallback(data)
        handle = getattr(self._local, "handle", None)
        if handle is None:
            handle = self._local.handle = _Handle(self._lib)
        width, height, subsampling, colorspace = handle.out
        for value in handle.out:
            value.value = 0  # a header that only draws warnings leaves them unset
        status = self._lib.tjDecompressHeader3(handle.value, data, len(data), *handle.refs)
        if status != 0 and self._lib.tjGetErrorCode(handle.value) != _TJERR_WARNING:
            raise OSError(self._lib.tjGetErrorStr2(handle.value).decode("utf-8", "replace"))
        return width.value, height.value, subsampling.value, colorspace.value


# libjpeg-turbo's TJSAMP_* by the first component's sampling factors (h, v), the chroma
# components being 1x1; -1 is TJSAMP_UNKNOWN (libjpeg-turbo 2 refuses such a header).
_TJSAMP = {(1, 1): 0, (2, 1): 1, (2, 2): 2, (1, 2): 4, (4, 1): 5}
_TJSAMP_GRAY = 3
_TJCS_RGB, _TJCS_YCBCR, _TJCS_GRAY, _TJCS_CMYK, _TJCS_YCCK = range(5)
_SOF = frozenset([0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF])


class NvimgcodecHeader:
    """TurboHeader's answer without libjpeg-turbo's TurboJPEG API: nvImageCodec's header
    parser (a required dependency) checks the header and gives the size; subsampling and
    colour space come from the markers by libjpeg-turbo's rules (sampling factors; JFIF,
    Adobe transform, component ids), which nvImageCodec does not follow for RGB-coded and
    CMYK JPEGs. OSError for a header nvImageCodec rejects (where libjpeg-turbo returns
    zeros for a header that only draws warnings). Thread-safe: nothing is shared."""

    def __init__(self):
        from feedline.decoders.nvimgcodec_library import load_nvimgcodec
        self._nv = load_nvimgcodec()

    def __call__(self, data: bytes) -> tuple[int, int, int, int]:
        try:
            stream = self._nv.CodeStream(bytes(data))
            width, height, codec = stream.width, stream.height, stream.codec_name
        except RuntimeError as exc:  # "Failed to get image info"
            raise OSError(f"nvImageCodec cannot read the JPEG header ({exc})") from None
        if codec != "jpeg":
            raise OSError(f"Not a JPEG file: {codec or 'unknown'} data")
        jfif, adobe, components = _markers(data)
        return width, height, _subsampling(components), _colorspace(jfif, adobe, components)


def _subsampling(components: tuple[tuple[int, int, int], ...]) -> int:
    """tjDecompressHeader3's subsampling from the frame's (id, h, v) per component."""
    if len(components) == 1:
        return _TJSAMP_GRAY
    if len(components) not in (3, 4) or any(c[1:] != (1, 1) for c in components[1:3]):
        return -1
    if len(components) == 4 and components[3][1:] != components[0][1:]:
        return -1
    return _TJSAMP.get(components[0][1:], -1)


def _colorspace(jfif: bool, adobe: int | None, components: tuple[tuple[int, int, int], ...]) -> int:
    """libjpeg's default_decompress_parms: the JPEG colour space from its markers."""
    channels, ids = len(components), tuple(c[0] for c in components)
    if channels == 1:
        return _TJCS_GRAY
    if channels == 3:
        if jfif:
            return _TJCS_YCBCR
        if adobe is not None:
            return _TJCS_RGB if adobe == 0 else _TJCS_YCBCR
        return _TJCS_RGB if ids == (0x52, 0x47, 0x42) else _TJCS_YCBCR   # component ids 'R', 'G', 'B'
    if channels == 4:
        return _TJCS_YCCK if adobe == 2 else _TJCS_CMYK
    return -1


def _markers(data: bytes) -> tuple[bool, int | None, tuple[tuple[int, int, int], ...]]:
    """(JFIF marker seen, Adobe transform or None, the frame's (id, h, v) per component),
    from the markers before the first SOS."""
    jfif, adobe, components = False, None, ()
    pos, n = 2, len(data)
    while pos + 4 <= n and data[pos] == 0xFF:
        marker, length = data[pos + 1], int.from_bytes(data[pos + 2:pos + 4], "big")
        if marker == 0xFF:      # fill byte
            pos += 1
            continue
        if marker == 0xDA:      # SOS: the image data starts
            break
        segment = data[pos + 4:pos + 2 + length]
        if marker == 0xE0 and segment.startswith(b"JFIF\x00"):
            jfif = True
        elif marker == 0xEE and segment.startswith(b"Adobe") and len(segment) >= 12:
            adobe = segment[11]
        elif marker in _SOF and len(segment) >= 6:
            components = tuple((segment[6 + 3 * k], segment[7 + 3 * k] >> 4, segment[7 + 3 * k] & 15)
                               for k in range(segment[5]) if 8 + 3 * k < len(segment))
        pos += 2 + length
    return jfif, adobe, components
