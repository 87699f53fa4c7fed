"""Batch memory a worker writes into: one mapping per Slot.

Shared with worker processes, it is an anonymous memory file (memfd): nothing is named in
/dev/shm, so a process killed at any moment leaves no segment behind; the memory goes
when the last process that maps it (or the last tensor over it) goes. A worker process
gets the descriptor once, over its socket (SCM_RIGHTS), and maps it; afterwards only plans
and slot numbers travel, never pixels. For worker threads it is private memory of this
process, on huge pages where Linux gives them.
"""
from __future__ import annotations

import ctypes
import functools
import mmap
import os

_MADV_HUGEPAGE = 14
_HUGE_PAGE = 2 << 20


class Arena:
    """``nbytes`` mapped here: a memfd (``shared``), whose ``fd`` stays open until
    ``close_fd()`` so workers started later (after an interrupted run) can map it too; or
    private memory (no ``fd``)."""

    def __init__(self, nbytes: int, name: str = "feedline-slot", shared: bool = True):
        self.nbytes, self.fd = nbytes, None
        if not shared:
            self.memory = mmap.mmap(-1, max(nbytes, 1))
            advise_huge_pages(self.memory)
            return
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, max(nbytes, 1))
            self.memory = mmap.mmap(fd, max(nbytes, 1))
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd

    def close_fd(self) -> None:
        """The descriptor is no longer needed; the mapping lives while anything refers to it."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class SharedFd:
    """A descriptor as a process argument: inherited by fork, duplicated for spawn."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        from multiprocessing.reduction import DupFd
        return SharedFd._rebuilt, (DupFd(self.fd),)

    @staticmethod
    def _rebuilt(dup) -> "SharedFd":
        return SharedFd(dup.detach())


def attach(fd: int, nbytes: int) -> mmap.mmap:
    """A worker process's mapping of an arena whose descriptor it received (then closed)."""
    try:
        return mmap.mmap(fd, max(nbytes, 1))
    finally:
        os.close(fd)


@functools.lru_cache(maxsize=None)
def _madvise():
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):  # not Linux
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return madvise


def advise_huge_pages(memory: mmap.mmap) -> None:
    """Ask Linux for 2 MiB pages under fresh batch memory (best effort): first-touch faults
    on 4 KiB pages would otherwise cost more than the normalization written into them."""
    if _madvise() is None or len(memory) < _HUGE_PAGE:
        return
    anchor = ctypes.c_char.from_buffer(memory)
    address = ctypes.addressof(anchor)
    del anchor   # a live export would pin the mapping's size
    start = -(-address // _HUGE_PAGE) * _HUGE_PAGE
    end = (address + len(memory)) // _HUGE_PAGE * _HUGE_PAGE
    if end > start:
        _madvise()(start, end - start, _MADV_HUGEPAGE)  # a failure only means small pages
