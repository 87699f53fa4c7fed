"""nvImageCodec, imported once and quietly, and one CPU decoder per thread.

On a machine without a GPU, importing nvImageCodec prints errors about nvJPEG2000 and
nvTIFF (the extensions print some themselves, its logger the rest) and every failed
decode logs an ERROR and a WARNING. feedline reports failures itself (DecodeError with
the record), so: the library's logger is silenced with its own setting,
PYNVIMGCODEC_VERBOSITY=0, which it reads at import (set only for the import, and only
when the user has not set it), and file descriptor 2 goes to /dev/null for the import,
which silences the extensions' direct prints. libjpeg's own one-line warnings
("Corrupt JPEG data: ...") on damaged images are not nvImageCodec's and still show.
"""
from __future__ import annotations

import importlib
import os
import sys
import threading

_VERBOSITY = "PYNVIMGCODEC_VERBOSITY"
_lock = threading.Lock()
_module = None


def load_nvimgcodec():
    """The ``nvidia.nvimgcodec`` module, imported once without its start-up noise.
    Raises ImportError when it is not installed."""
    global _module
    if _module is None:
        with _lock:
            if _module is None:
                _module = _import_quietly()
    return _module


def _import_quietly():
    added = _VERBOSITY not in os.environ
    if added:
        os.environ[_VERBOSITY] = "0"
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 2)
            try:
                return importlib.import_module("nvidia.nvimgcodec")
            finally:
                os.dup2(saved, 2)
        finally:
            os.close(devnull)
    finally:
        os.close(saved)
        if added:
            os.environ.pop(_VERBOSITY, None)


class ThreadDecoders:
    """One nvImageCodec CPU decoder per calling thread.

    A ``nvimgcodec.Decoder`` must not be shared by threads: two threads decoding with
    one decoder get wrong images and "std::future_error: Broken promise". A decoder per
    thread is cheap to create and decodes one image per call on that thread's core, with
    the GIL released.
    """

    def __init__(self, options: str = ""):
        self._nv = load_nvimgcodec()
        self._options = options
        self._local = threading.local()

    def get(self):
        decoder = getattr(self._local, "decoder", None)
        if decoder is None:
            nv = self._nv
            decoder = self._local.decoder = nv.Decoder(
                device_id=nv.NVIMGCODEC_DEVICE_CPU_ONLY, max_num_cpu_threads=1,
                backends=[nv.Backend(nv.CPU_ONLY)], options=self._options)
        return decoder
