"""Write an HDF5 store (see feedline.format): image bytes contiguous, memory-mappable.

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

import errno
import json
import logging
import os

import h5py
import numpy as np

from feedline.errors import PackError
from feedline.format import (COLUMN_NAMES, HDF5_IMAGES, HDF5_MASK_OFFSETS, HDF5_MASKS, HDF5_META_ATTR, HDF5_OFFSETS,
                             Columns, meta_to_bytes)
from feedline.targets import TARGET_DTYPES

from .disk_space import write_failed
from .journal import JournalEntry
from .writer_base import HDF5_STAGING_SUFFIXES, Writer, remove_quietly, start_writeback

log = logging.getLogger(__name__)

_FALLBACK_OFFSET = 4096
_IOV_MAX = 1024  # buffers per writev: the Linux limit
_STAGE_BYTES = 1 << 20  # added records are written once they hold this much
_COPY_FALLBACK_ERRNOS = (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF)


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
    def __init__(self, out: str):
        super().__init__(out)
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
        remove_quietly(self.partial_path)  # the container is always rebuilt from the staging files
        entries: list[JournalEntry] = []
        if resume and os.path.exists(self.journal_path) and os.path.exists(self.staging_path):
            entries = self._recover()
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

    def _recover(self) -> list[JournalEntry]:
        """Entries of the complete journal lines; cut both files back to the last of them.
        The journal's first line says where the staged bytes start."""
        with open(self.journal_path, "rb") as fh:
            raw = fh.read()
        complete = raw[:raw.rfind(b"\n") + 1]  # a line without its newline was cut short
        lines = complete.splitlines()
        try:
            self.base = int(json.loads(lines[0])["staged_at"])
        except (IndexError, ValueError, KeyError, TypeError):
            raise PackError(f"{self.journal_path}: not a feedline staging journal; "
                            "start over without --resume") from None
        entries = [JournalEntry.from_bytes(line, self.journal_path) for line in lines[1:]]
        nbytes = sum(sum(e.lengths) for e in entries)
        staged = os.path.getsize(self.staging_path) - self.base
        if staged < nbytes:
            raise PackError(f"{self.staging_path}: {staged} staged bytes but the journal needs {nbytes}; "
                            "start over without --resume")
        _cut_staged_masks(self.masks_path, entries)
        os.truncate(self.journal_path, len(complete))
        # Also undoes a container head and tail written around the bytes by an interrupted finish.
        os.truncate(self.staging_path, self.base + nbytes)
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
                _write_all(fd, buffers)
            except OSError as exc:
                raise write_failed(path, exc) from None

    def commit(self, entry: JournalEntry) -> None:
        self._stage()
        try:
            _write_all(self._journal, [entry.to_bytes() + b"\n"])
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
        self.close()
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
                _copy_range(self.staging_path, self.base, self.partial_path, data_offset, total)
                if mask_total:
                    _copy_range(self.masks_path, 0, self.partial_path, masks_at, mask_total)
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
        _copy_range(writer.masks_path, 0, writer.staging_path, masks_at, mask_total)
    os.replace(writer.staging_path, writer.partial_path)


def _cut_staged_masks(path: str, entries: list[JournalEntry]) -> None:
    """The staged masks cut back to what the journal's entries hold (a missing file: none staged yet)."""
    needed = sum(sum(e.mask_lengths) for e in entries)
    staged = os.path.getsize(path) if os.path.exists(path) else 0
    if staged < needed:
        raise PackError(f"{path}: {staged} staged mask bytes but the journal needs {needed}; "
                        "start over without --resume")
    if staged:
        os.truncate(path, needed)


def _offsets(lengths) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _write_all(fd: int, buffers: list[bytes]) -> None:
    """Write all ``buffers`` in order, few system calls (writev), partial writes resumed."""
    views = [memoryview(b) for b in buffers if len(b)]
    i = 0
    while i < len(views):
        written = os.writev(fd, views[i:i + _IOV_MAX])
        while i < len(views) and written >= len(views[i]):
            written -= len(views[i])
            i += 1
        if written:
            views[i] = views[i][written:]


def _copy_range(src: str, src_offset: int, dst: str, dst_offset: int, count: int) -> None:
    """Copy ``count`` bytes in the kernel from ``src`` to ``dst``, then fsync ``dst``."""
    with open(src, "rb") as s, open(dst, "r+b") as d:
        done = 0
        try:
            while done < count:
                n = os.copy_file_range(s.fileno(), d.fileno(), count - done,
                                       src_offset + done, dst_offset + done)
                if n == 0:
                    raise PackError(f"{src}: ended after {done} of {count} bytes")
                done += n
        except (OSError, AttributeError) as exc:
            if isinstance(exc, OSError) and exc.errno not in _COPY_FALLBACK_ERRNOS:
                raise
            log.debug("copy_file_range unavailable (%s); copying through a buffer", exc)
            buffer = memoryview(bytearray(8 << 20))
            while done < count:
                n = os.preadv(s.fileno(), [buffer[:min(len(buffer), count - done)]], src_offset + done)
                if n == 0:
                    raise PackError(f"{src}: ended after {done} of {count} bytes") from None
                written = 0
                while written < n:
                    written += os.pwrite(d.fileno(), buffer[written:n], dst_offset + done + written)
                done += n
        os.fsync(d.fileno())
