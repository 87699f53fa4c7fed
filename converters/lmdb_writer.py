"""Write a single-file LMDB store (see feedline.dataset.format), growing its map as needed.

One writer, so the environment is opened with ``lock=False`` (no -lock file) and
``sync=False``: each commit is a write() into the page cache, which survives the
process being killed; one fsync at the end makes the finished file durable.

Records are put into an open write transaction as they come (``add``) and committed
with their journal entry; LMDB copies each one into its own pages at once, so the
caller's bytes are freed right away. When the map is full, the transaction is
aborted, the map grows, and the caller adds the chunk again (ChunkLost).
"""
from __future__ import annotations

import logging
import os

import lmdb

from feedline.core.errors import PackError
from feedline.dataset.format import (LMDB_COLUMN_PREFIX, LMDB_JOURNAL_PREFIX, LMDB_META_KEY, MASK_SUFFIX, image_key,
                             journal_key, meta_to_bytes)

from .disk_space import write_failed
from .journal import JournalEntry
from .writer_base import ChunkLost, Writer, remove_quietly, start_writeback

log = logging.getLogger(__name__)

INITIAL_MAP_SIZE = 1 << 30  # address space only: the file grows with what is written


class LmdbWriter(Writer):
    def __init__(self, out: str):
        super().__init__(out)
        self._env: lmdb.Environment | None = None
        self._txn: lmdb.Transaction | None = None   # the chunk being added, until its commit
        self._chunk_bytes = 0
        self._fd: int | None = None
        self._map_size = INITIAL_MAP_SIZE
        self._flushed = self._size = 0  # writeback started up to / file size at the last commit

    def start(self, resume: bool) -> list[JournalEntry]:
        if not resume:
            remove_quietly(self.partial_path)
        existed = os.path.exists(self.partial_path)
        self._open()
        if not existed:
            return []
        entries = []
        with self._env.begin(buffers=False) as txn:
            finished = txn.get(LMDB_META_KEY) is not None
            cursor = txn.cursor()
            if not finished and cursor.set_range(LMDB_JOURNAL_PREFIX):
                for key, value in cursor:
                    if not key.startswith(LMDB_JOURNAL_PREFIX):
                        break
                    entries.append(JournalEntry.from_bytes(value, self.partial_path))
        if finished:
            # Killed between its last commit and the rename: complete, but we cannot
            # prove it was made from this input. Packing again is the safe choice.
            log.warning("%s: a finished but unrenamed pack; packing again", self.partial_path)
            self.discard()
            self._open()
            return []
        images = self._env.stat()["entries"] - len(entries)  # an unfinished pack holds nothing else
        listed = sum(e.records + len(e.mask_lengths) for e in entries)   # a mask is a value of its own
        if images != listed:
            what = "images and masks" if any(e.mask_lengths for e in entries) else "images"
            raise PackError(f"{self.partial_path}: {images} {what} but the journal lists "
                            f"{listed}; start over without --resume")
        return entries

    def _open(self) -> None:
        size = os.path.getsize(self.partial_path) if os.path.exists(self.partial_path) else 0
        # Create it ourselves first: an unwritable place then raises the OSError that says
        # so, not an lmdb.Error we would take for a damaged file.
        os.close(os.open(self.partial_path, os.O_WRONLY | os.O_CREAT, 0o644))
        self._map_size = max(INITIAL_MAP_SIZE, 2 * size)
        try:
            self._env = lmdb.open(self.partial_path, subdir=False, lock=False, sync=False,
                                  map_size=self._map_size, readahead=False, meminit=False,
                                  max_dbs=0, max_readers=4)
        except lmdb.Error as exc:
            raise PackError(f"{self.partial_path}: cannot open as LMDB ({exc}); "
                            "start over without --resume") from None
        self._fd = os.open(self.partial_path, os.O_RDONLY)  # only to start writeback early

    def add(self, index: int, data: bytes) -> None:
        self._put(image_key(index), index, data)

    def add_mask(self, index: int, data: bytes) -> None:
        self._put(image_key(index) + MASK_SUFFIX, index, data)

    def _put(self, key: bytes, index: int, data: bytes) -> None:
        if self._txn is None:
            self._txn, self._chunk_bytes = self._env.begin(write=True), 0
        self._chunk_bytes += len(data)
        try:
            # Record keys only grow (a mask's right after its image's), so append=True skips the B-tree search.
            self._txn.put(key, data, append=True)
        except lmdb.MapFullError:
            lost = self._chunk_bytes  # _abort() zeroes it: room for what was lost, not for nothing
            self._abort()
            self._grow(lost)
            raise ChunkLost(f"{self.partial_path}: the LMDB map was full at record {index}") from None
        except (lmdb.Error, OSError) as exc:
            self._abort()
            raise write_failed(self.partial_path, exc) from None

    def commit(self, entry: JournalEntry) -> None:
        def fill(txn: lmdb.Transaction) -> None:
            txn.put(journal_key(entry.chunk), entry.to_bytes())

        self._write(fill, self._chunk_bytes)
        # Writeback of what the commit before this one appended (see Hdf5Writer.commit).
        size = os.fstat(self._fd).st_size
        if self._flushed < self._size:
            start_writeback(self._fd, self._flushed, self._size - self._flushed)
            self._flushed = self._size
        self._size = size

    def finish(self, columns: dict[str, bytes], meta: dict, lengths: list[int], mask_lengths: list[int] = ()) -> None:
        def fill(txn: lmdb.Transaction) -> None:
            for name, buf in columns.items():
                txn.put(LMDB_COLUMN_PREFIX + name.encode(), buf)
            txn.put(LMDB_META_KEY, meta_to_bytes(meta))
            for key in list(_keys_with_prefix(txn, LMDB_JOURNAL_PREFIX)):
                txn.delete(key)

        self._write(fill, sum(len(b) for b in columns.values()))
        try:
            self._env.sync(True)
        except lmdb.Error as exc:
            raise write_failed(self.partial_path, exc) from None
        self.close()

    def _write(self, fill, nbytes: int) -> None:
        """Run ``fill`` in the open write transaction (the chunk added so far) or a new one,
        and commit. On a full map, grow it; then redo a transaction of ``fill`` alone, but
        raise ChunkLost for one that held added records (they are gone with it)."""
        while True:
            streamed = self._txn is not None
            txn, self._txn, self._chunk_bytes = self._txn or self._env.begin(write=True), None, 0
            try:
                with txn:  # commits, or aborts on an exception
                    fill(txn)
                return
            except lmdb.MapFullError:
                self._grow(nbytes)
                if streamed:
                    raise ChunkLost(f"{self.partial_path}: the LMDB map was full at a commit") from None
            except (lmdb.Error, OSError) as exc:
                raise write_failed(self.partial_path, exc) from None

    def _grow(self, nbytes: int) -> None:
        """Room for the aborted transaction (``nbytes`` of records) and more."""
        self._map_size = max(2 * self._map_size, self._map_size + 4 * nbytes)
        log.debug("%s: map full, growing it to %d MiB", self.partial_path, self._map_size >> 20)
        self._env.set_mapsize(self._map_size)

    def _abort(self) -> None:
        if self._txn is not None:
            self._txn.abort()
            self._txn, self._chunk_bytes = None, 0

    def close(self) -> None:
        self._abort()  # records added since the last commit: not kept
        if self._env is not None:
            self._env.close()
            self._env = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _keys_with_prefix(txn: lmdb.Transaction, prefix: bytes):
    cursor = txn.cursor()
    if not cursor.set_range(prefix):
        return
    for key in cursor.iternext(keys=True, values=False):
        key = bytes(key)
        if not key.startswith(prefix):
            return
        yield key
