"""Page-cache control for bench/cold_cache.py: drop a file's pages, read them all in,
say how much of a file is resident (mincore), count what this process read from
storage; and a decoder that does no work, to measure reading alone."""
from __future__ import annotations

import ctypes
import mmap
import os

import numpy as np

from feedline.decoders.base import Decoder

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def drop(files: list[str]) -> None:
    """Drop the files' pages from the page cache. Pages mapped by a process stay: close
    stores first. Dirty pages are written first (fsync), or they would stay too."""
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm(files: list[str]) -> None:
    """Read every byte of the files, so they are in the page cache."""
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            while os.read(fd, 16 << 20):
                pass
        finally:
            os.close(fd)


def resident_fraction(files: list[str]) -> float | None:
    """The share of the files' pages in the page cache (mincore); None where it cannot tell."""
    resident = total = 0
    page = mmap.PAGESIZE
    for path in files:
        size = os.path.getsize(path)
        if size == 0:
            continue
        with open(path, "rb") as fh:
            # A private writable map is never written, so no page is copied; it gives ctypes an address.
            m = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_COPY)
        try:
            pages = (size + page - 1) // page
            vec = np.zeros(pages, dtype=np.uint8)
            address = ctypes.addressof(ctypes.c_char.from_buffer(m))
            if _libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(size), vec.ctypes.data_as(ctypes.c_void_p)):
                return None
            resident += int(np.count_nonzero(vec & 1))
            total += pages
        finally:
            del address
            m.close()
    return resident / total if total else None


def read_bytes() -> int:
    """Bytes this process has caused to be read from storage (/proc/self/io), or 0."""
    try:
        with open("/proc/self/io") as fh:
            for line in fh:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class NullDecoder(Decoder):
    """Decodes nothing: the loader still reads and checksums every record. Its name is one
    the loader's configuration accepts; the instance is what the threads use."""

    name = "pil"

    def decode(self, data) -> np.ndarray:
        return np.zeros((1, 1, 3), dtype=np.uint8)

    def decode_into(self, data, box, flip: bool, out: np.ndarray) -> None:
        out[0, 0, 0] = memoryview(data)[0]
