"""Write an HDF5 store (see feedline.dataset.format): image bytes contiguous, memory-mappable.

The total size of the images is known only at the end, and a contiguous dataset
cannot grow, so records are staged: their bytes are appended to OUT.partial.images
(a writev per MiB or so, so the records' memory is reused soon) and each commit
appends one journal line to OUT.partial.journal (after its bytes, so a line never
names bytes that were not written; staged bytes past the last line are cut on resume).

The staged bytes start at the offset where HDF5 puts the first dataset of a new
file (2048 today; asked of HDF5, not assumed, and kept in the journal's first line). ``finish`` creates the container:
an HDF5 file whose images dataset is allocated at its exact size (early
allocation, never filled) but never written, so it is a hole. When the dataset
lies where the staged bytes lie, the container's head and tail (superblock,
columns, metadata: kilobytes) are written around the staged bytes and the staging
file becomes the result: the image bytes are written once. Otherwise the kernel
copies them into the container (copy_file_range); Python never copies them.
"""
from __future__ import annotations

import json
import logging
import os

import h5py
import numpy as np

from feedline.core.errors import PackError
from feedline.dataset.format import (COLUMN_NAMES, HDF5_IMAGES, HDF5_MASK_OFFSETS, HDF5_MASKS, HDF5_META_ATTR, HDF5_OFFSETS,
                             Columns, meta_to_bytes)
from feedline.dataset.targets import TARGET_DTYPES

from .disk_space import write_failed
from .journal import JournalEntry
from .output_lock import OutputLock
from .staged_files import copy_range, recover, write_all
from .writer_base import HDF5_STAGING_SUFFIXES, Writer, remove_quietly, start_writeback

log = logging.getLogger(__name__)

_FALLBACK_OFFSET = 4096
_STAGE_BYTES = 1 << 20  # added records are written once they hold this much


def _create_images(fh: h5py.File, size: int, name: str = HDF5_IMAGES) -> h5py.Dataset:
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.CONTIGUOUS)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)   # space reserved now, so it has an offset
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)     # and no zeros written there
    return fh.create_dataset(name, shape=(size,), dtype=np.uint8, dcpl=dcpl)


def images_offset() -> int:
    """Where HDF5 places the images dataset of a new file (it is created first)."""
    with h5py.File("feedline-probe", "w", driver="core", backing_store=False) as fh:
        offset = _create_images(fh, 1 << 20).id.get_offset()
    return offset if offset is not None else _FALLBACK_OFFSET


class Hdf5Writer(Writer):
    """Holds the output's lock from construction to ``close`` or ``discard``: a second pack to
    the same output refuses at once instead of rewriting the first one's staging files."""

    def __init__(self, out: str):
        super().__init__(out)
        self._lock = OutputLock(self.partial_path, out)
        # the staged bytes, the journal, the records' masks (staged as the bytes are, once the first comes)
        self.staging_path, self.journal_path, self.masks_path = (self.partial_path + suffix
                                                                 for suffix in HDF5_STAGING_SUFFIXES)
        self._staging: int | None = None
        self._journal: int | None = None
        self._masks: int | None = None
        self.base = 0  # offset of the first staged byte
        self._added: list[bytes] = []   # records added and not yet written
        self._added_masks: list[bytes] = []
        self._added_bytes = 0
        self._flushed = self._written = 0  # writeback started up to / staged bytes end at the last commit

    @property
    def side_paths(self) -> list[str]:
        return [self.staging_path, self.journal_path, self.masks_path]

    def start(self, resume: bool) -> list[JournalEntry]:
        try:
            return self._start(resume)
        except BaseException:
            self.close()
            raise

    def _start(self, resume: bool) -> list[JournalEntry]:
        remove_quietly(self.partial_path)  # the container is always rebuilt from the staging files
        entries: list[JournalEntry] = []
        if resume and os.path.exists(self.journal_path) and os.path.exists(self.staging_path):
            self.base, entries = recover(self.journal_path, self.staging_path, self.masks_path)
        else:
            self.base = images_offset()
            with open(self.staging_path, "wb") as fh:
                fh.truncate(self.base)
            with open(self.journal_path, "wb") as fh:
                fh.write(json.dumps({"staged_at": self.base}).encode() + b"\n")
            remove_quietly(self.masks_path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        self._staging = os.open(self.staging_path, flags, 0o644)
        self._journal = os.open(self.journal_path, flags, 0o644)
        if os.path.exists(self.masks_path):   # made by the first mask (a pack without masks has none)
            self._masks = os.open(self.masks_path, flags, 0o644)
        return entries

    def add(self, index: int, data: bytes) -> None:
        self._added.append(data)
        self._added_bytes += len(data)
        if self._added_bytes >= _STAGE_BYTES:
            self._stage()

    def add_mask(self, index: int, data: bytes) -> None:
        if self._masks is None:
            self._masks = os.open(self.masks_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._added_masks.append(data)
        self._added_bytes += len(data)

    def _stage(self) -> None:
        added, masks, self._added, self._added_masks, self._added_bytes = self._added, self._added_masks, [], [], 0
        for fd, path, buffers in ((self._staging, self.staging_path, added), (self._masks, self.masks_path, masks)):
            if not buffers:
                continue
            try:
                write_all(fd, buffers)
            except OSError as exc:
                raise write_failed(path, exc) from None

    def commit(self, entry: JournalEntry) -> None:
        self._stage()
        try:
            write_all(self._journal, [entry.to_bytes() + b"\n"])
        except OSError as exc:
            raise write_failed(self.journal_path, exc) from None
        # The chunk before this one: pages being appended to now are left alone, so that
        # writeback (which allocates their blocks) does not contend with the appends.
        written = os.fstat(self._staging).st_size
        if self._flushed < self._written:
            start_writeback(self._staging, self._flushed, self._written - self._flushed)
            self._flushed = self._written
        self._written = written

    def finish(self, columns: dict[str, bytes], meta: dict, lengths: list[int], mask_lengths: list[int] = ()) -> None:
        self._close_files()   # the lock stays held: the result is not OUT yet
        total, mask_total = int(sum(lengths)), int(sum(mask_lengths))
        staged = os.path.getsize(self.staging_path) - self.base
        staged_masks = os.path.getsize(self.masks_path) if os.path.exists(self.masks_path) else 0
        for path, have, want in ((self.staging_path, staged, total), (self.masks_path, staged_masks, mask_total)):
            if have != want:
                raise PackError(f"{path}: {have} staged bytes, expected {want}; start over without --resume")
        try:
            fields = {k: np.frombuffer(v, dtype=TARGET_DTYPES[k]) for k, v in columns.items()
                      if k in TARGET_DTYPES and k not in COLUMN_NAMES}   # the columns of fields beyond label
            data_offset, masks_at = self._create_container(
                Columns.from_buffers(columns, len(lengths), self.partial_path), meta, _offsets(lengths), fields,
                _offsets(mask_lengths) if mask_lengths else None)
            if data_offset == self.base:
                _wrap_staged_bytes(self, total, masks_at, mask_total)
            else:
                log.debug("HDF5 put the images at %d, not %d: copying them", data_offset, self.base)
                copy_range(self.staging_path, self.base, self.partial_path, data_offset, total)
                if mask_total:
                    copy_range(self.masks_path, 0, self.partial_path, masks_at, mask_total)
        except OSError as exc:
            remove_quietly(self.partial_path)
            raise write_failed(self.partial_path, exc) from None

    def _create_container(self, columns: Columns, meta: dict, offsets: np.ndarray, fields: dict,
                          mask_offsets: np.ndarray | None) -> tuple[int, int]:
        """The HDF5 file with everything but the image (and mask) bytes; returns where they go."""
        masks_at = 0
        with h5py.File(self.partial_path, "w") as fh:
            data_offset = _create_images(fh, int(offsets[-1])).id.get_offset()
            fh.create_dataset(HDF5_OFFSETS, data=offsets)
            if mask_offsets is not None:
                masks_at = _create_images(fh, int(mask_offsets[-1]), HDF5_MASKS).id.get_offset() or 0
                fh.create_dataset(HDF5_MASK_OFFSETS, data=mask_offsets)
            for name in columns.names:
                fh.create_dataset(name, data=columns.array(name))
            for name, array in fields.items():
                fh.create_dataset(name, data=array)
            fh.attrs[HDF5_META_ATTR] = meta_to_bytes(meta).decode("utf-8")
        if data_offset is None:
            raise PackError(f"{self.partial_path}: HDF5 did not allocate the images dataset")
        return int(data_offset), int(masks_at)

    def close(self) -> None:
        self._close_files()
        self._lock.release()

    def discard(self) -> None:
        self._close_files()
        for path in [self.partial_path, *self.side_paths]:
            remove_quietly(path)
        self._lock.release()   # last: the next pack's files are never removed here

    def _close_files(self) -> None:
        self._added, self._added_masks, self._added_bytes = [], [], 0  # not committed: not kept
        for name in ("_staging", "_journal", "_masks"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)


def _wrap_staged_bytes(writer: Hdf5Writer, total: int, masks_at: int = 0, mask_total: int = 0) -> None:
    """Write the container's head and tail around the staged bytes; the staging file
    becomes the container. Everything in HDF5 is addressed by file offset, so the
    result is byte for byte the container with its holes filled: the images' (the staged
    bytes themselves) and the masks' (copied in by the kernel)."""
    base, end = writer.base, writer.base + total
    with open(writer.partial_path, "rb") as fh:
        head = fh.read(base)
        length = os.fstat(fh.fileno()).st_size
        if mask_total and masks_at < end:
            raise PackError(f"{writer.partial_path}: HDF5 put the masks before the images' end; start over")
        pieces = []
        for start, stop in [(end, masks_at), (masks_at + mask_total, length)] if mask_total else [(end, length)]:
            fh.seek(start)
            pieces.append((start, fh.read(stop - start)))
    fd = os.open(writer.staging_path, os.O_WRONLY)
    try:
        os.pwrite(fd, head, 0)
        for start, piece in pieces:
            os.pwrite(fd, piece, start)
        os.ftruncate(fd, length)
        os.fsync(fd)
    finally:
        os.close(fd)
    if mask_total:
        copy_range(writer.masks_path, 0, writer.staging_path, masks_at, mask_total)
    os.replace(writer.staging_path, writer.partial_path)


def _offsets(lengths) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets
