"""libjpeg-turbo's tjDecompressHeader3 through ctypes, one handle per thread.

PyTurboJPEG's ``decode_header`` creates and destroys a decompressor on every call,
which costs more than reading the header when a pack checks thousands of files;
here each thread keeps its handle. Falls back to PyTurboJPEG when libturbojpeg
cannot be found by name (PyTurboJPEG knows more places to look).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import threading
import weakref

_TJERR_WARNING = 0


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
    """Callable: JPEG bytes -> (width, height, subsampling, colorspace); OSError when
    libjpeg-turbo rejects the header. Thread-safe."""

    def __init__(self):
        self._local = threading.local()
        self._lib = None
        self._fallback = None
        path = ctypes.util.find_library("turbojpeg")
        try:
            # PyDLL keeps the GIL through the call: reading a header takes a microsecond or
            # two, less than handing the GIL to another thread and taking it back.
            lib = ctypes.PyDLL(path) if path else None
        except OSError:
            lib = None
        if lib is None or not hasattr(lib, "tjDecompressHeader3"):
            from turbojpeg import TurboJPEG
            self._fallback = TurboJPEG().decode_header
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
        if self._lib is None:
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
