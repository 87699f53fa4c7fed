"""Batch memory shared with the worker processes, and how a worker writes a sample into it.

An Arena is an anonymous memory file (memfd): nothing is named in /dev/shm, so a process
killed at any moment leaves no segment behind; the memory goes when the last process
that maps it exits. Its descriptor goes to each worker once, over the worker's socket
(SCM_RIGHTS); afterwards only plans and slot numbers travel, never pixels.

A RowFormat says what a row of an arena is: uint8 pixels (N x H x W x 3, for a CUDA
Finisher or an output dtype numpy lacks), or the host batch the consumer receives,
normalized into the output's dtype and layout. RowWriter is the worker's side: numpy
and OpenCV only (no torch), so a worker imports only what it uses.
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RowFormat:
    """The layout of one arena: ``batch`` rows of ``size`` (H, W). ``dtype``: numpy's name of
    the row's dtype ("uint8", "float32", "float16"); ``channels_last``: H x W x 3 rows (always
    for pixels), else 3 x H x W; ``table``: uint8 level -> normalized value per channel
    (1 x 256 x 3 float32), None for pixels."""

    batch: int
    size: tuple[int, int]
    dtype: str = "uint8"
    channels_last: bool = True
    table: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        h, w = self.size
        return (self.batch, h, w, 3) if self.channels_last else (self.batch, 3, h, w)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize

    @property
    def in_place(self) -> bool:
        """Whether a row is the decoded sample itself (uint8 H x W x 3)."""
        return self.dtype == "uint8" and self.channels_last and self.table is None


class Arena:
    """One memfd of ``nbytes``, mapped here. ``fd`` is closed once every worker has its copy
    (``release_fd``); the mapping lives while anything (a tensor) refers to it."""

    def __init__(self, nbytes: int, name: str = "feedline-slot"):
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, max(nbytes, 1))
            self.memory = mmap.mmap(fd, max(nbytes, 1))
        except BaseException:
            os.close(fd)
            raise
        self.fd: int | None = fd
        self.nbytes = nbytes

    def release_fd(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class SharedFd:
    """An arena's descriptor as a process argument: inherited by fork, duplicated for spawn."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        from multiprocessing.reduction import DupFd
        return SharedFd._rebuilt, (DupFd(self.fd),)

    @staticmethod
    def _rebuilt(dup) -> "SharedFd":
        return SharedFd(dup.detach())


def attach(fd: int, nbytes: int) -> mmap.mmap:
    """A worker's mapping of an arena whose descriptor it received (the descriptor is closed)."""
    try:
        return mmap.mmap(fd, max(nbytes, 1))
    finally:
        os.close(fd)


class RowWriter:
    """A worker's view of one arena: where sample j is decoded (``buffer``) and how it is
    written into row j (``write``). Each worker has its own scratch (one thread per worker)."""

    def __init__(self, fmt: RowFormat, memory):
        self.fmt = fmt
        self.rows = np.frombuffer(memory, dtype=fmt.dtype, count=int(np.prod(fmt.shape))).reshape(fmt.shape)
        self._scratch = np.empty((*fmt.size, 3), dtype=np.uint8)
        self._converted = np.empty((*fmt.size, 3), dtype=np.float32) if fmt.table is not None else None

    def buffer(self, j: int, transformed: bool) -> np.ndarray:
        """uint8 H x W x 3: row j itself when it holds the pixels and nothing follows that
        needs them elsewhere, else scratch."""
        if self.fmt.in_place:
            return self.rows[j]
        return self._scratch

    def write(self, j: int, sample: np.ndarray) -> None:
        """``sample`` (uint8 H x W x 3) into row j: as it is, or normalized and cast."""
        row = self.rows[j]
        if self.fmt.in_place:
            if sample is not row:
                np.copyto(row, sample)
            return
        dst = row if self.fmt.channels_last else row.transpose(1, 2, 0)   # an H x W x 3 view of the row
        if self.fmt.table is None:
            np.copyto(dst, sample)
            return
        import cv2
        if self.fmt.dtype == "float32" and self.fmt.channels_last:
            cv2.LUT(sample, self.fmt.table, dst=dst)
            return
        cv2.LUT(sample, self.fmt.table, dst=self._converted)
        np.copyto(dst, self._converted, casting="unsafe")
