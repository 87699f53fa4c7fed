"""The writer interface that the LMDB and HDF5 writers implement, and what they share.

A writer owns the temporary files of one pack. ``start`` opens them (fresh, or
to resume, returning the journal), ``add`` (and ``add_mask``) hands it each record as soon as it is
checked (so the record's bytes can be freed, and their memory reused, at once),
``commit`` makes the records added since the last commit durable together with
their journal entry, atomically; ``finish`` writes columns and metadata and
leaves a complete file at ``partial_path``, which `pack` then renames to OUT.
``close`` keeps the temporary files for --resume (not what was added since the
last commit); ``discard`` removes them.
Below both writers; the factory that picks one is `writers.make_writer`.
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod

from .journal import JournalEntry

PARTIAL_SUFFIX = ".partial"
HDF5_STAGING_SUFFIXES = (".images", ".journal", ".masks")   # OUT.partial + each: staged bytes, journal, masks


class ChunkLost(Exception):
    """The records added since the last commit were rolled back (LMDB's map was full; the
    writer has grown it): add them again from the first one, then commit."""


def remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


class Writer(ABC):
    def __init__(self, out: str):
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
    def add(self, index: int, data: bytes) -> None:
        """Store ``data`` as record ``index``, the next one, in the chunk that the next
        ``commit`` completes. ChunkLost when the chunk was rolled back."""

    @abstractmethod
    def add_mask(self, index: int, data: bytes) -> None:
        """Store ``data`` as the mask of record ``index``, just added, in the same chunk."""

    @abstractmethod
    def commit(self, entry: JournalEntry) -> None:
        """Make the records added since the last commit and ``entry`` durable, atomically
        (they are records ``entry.first_record ...``). ChunkLost when the chunk was rolled back."""

    @abstractmethod
    def finish(self, columns: dict[str, bytes], meta: dict, lengths: list[int], mask_lengths: list[int] = ()) -> None:
        """Write the columns (`feedline.dataset.format.column_bytes`) and metadata; a complete,
        synced file at ``partial_path``. ``mask_lengths``: each record's stored mask, if any."""

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
