"""The writer interface shared by the LMDB and HDF5 writers, and the factory.

A writer owns the temporary files of one pack. ``start`` opens them (fresh, or
to resume, returning the journal), ``commit`` adds a chunk of records together
with its journal entry atomically, ``finish`` writes columns and metadata and
leaves a complete file at ``partial_path``, which `pack` then renames to OUT.
``close`` keeps the temporary files for --resume; ``discard`` removes them.
"""
from __future__ import annotations

import errno
import os
from abc import ABC, abstractmethod

from feedline.errors import PackError
from feedline.format import Columns

from .journal import JournalEntry
from .options import OutputFormat

PARTIAL_SUFFIX = ".partial"
_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def write_failed(where: str, exc: BaseException) -> PackError:
    """The PackError for a failed write: say where, and how to carry on."""
    detail = getattr(exc, "strerror", None) or str(exc)
    if getattr(exc, "errno", None) in _SPACE_ERRNOS or "space" in str(exc).lower():
        return PackError(f"{where}: no space left ({detail}); what is committed is intact: "
                         "free space and rerun with --resume")
    return PackError(f"{where}: write failed ({detail}); what is committed is intact: "
                     "fix the cause and rerun with --resume")


def remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


class Writer(ABC):
    def __init__(self, out: str):
        self.out = out
        self.partial_path = out + PARTIAL_SUFFIX

    @property
    def side_paths(self) -> list[str]:
        """Temporary files besides ``partial_path``."""
        return []

    @abstractmethod
    def start(self, resume: bool) -> list[JournalEntry]:
        """Open the temporary files: continue them when ``resume`` (returning their
        journal, empty when there is nothing to continue), else start afresh."""

    @abstractmethod
    def commit(self, images: list[bytes], entry: JournalEntry) -> None:
        """Store ``images`` as records ``entry.first_record ...`` and ``entry``, atomically."""

    @abstractmethod
    def finish(self, columns: Columns, meta: dict, lengths: list[int]) -> None:
        """Write columns and metadata; a complete, synced file at ``partial_path``."""

    @abstractmethod
    def close(self) -> None:
        """Release handles; temporary files stay for --resume."""

    def discard(self) -> None:
        """Close and remove every temporary file."""
        self.close()
        for path in [self.partial_path, *self.side_paths]:
            remove_quietly(path)

    def leftovers(self) -> list[str]:
        return [p for p in [self.partial_path, *self.side_paths] if os.path.exists(p)]


def make_writer(fmt: OutputFormat, out: str) -> Writer:
    if fmt is OutputFormat.LMDB:
        from .lmdb_writer import LmdbWriter
        return LmdbWriter(out)
    from .hdf5_writer import Hdf5Writer
    return Hdf5Writer(out)


_sync_file_range = None


def start_writeback(fd: int, offset: int = 0, nbytes: int = 0) -> None:
    """Ask the kernel to start writing ``fd``'s dirty pages in [offset, offset + nbytes)
    (to the end when ``nbytes`` is 0) to disk now, without waiting, so the fsync that
    ends a pack finds little left to do. Linux only; elsewhere a no-op."""
    global _sync_file_range
    if _sync_file_range is None:
        try:
            import ctypes
            fn = ctypes.CDLL(None, use_errno=True).sync_file_range
            fn.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
            _sync_file_range = fn
        except (OSError, AttributeError):
            _sync_file_range = False
    if _sync_file_range:
        _sync_file_range(fd, offset, nbytes, 2)  # SYNC_FILE_RANGE_WRITE; a failure only costs the head start
