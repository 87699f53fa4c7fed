"""Write a single-file LMDB store (see feedline.format), growing its map as needed.

One writer, so the environment is opened with ``lock=False`` (no -lock file) and
``sync=False``: each commit is a write() into the page cache, which survives the
process being killed; one fsync at the end makes the finished file durable.
"""
from __future__ import annotations

import logging
import os

import lmdb

from feedline.errors import PackError
from feedline.format import (LMDB_COLUMN_PREFIX, LMDB_JOURNAL_PREFIX, LMDB_META_KEY, image_key, journal_key,
                             meta_to_bytes)

from .disk_space import write_failed
from .journal import JournalEntry
from .writer_base import Writer, remove_quietly, start_writeback

log = logging.getLogger(__name__)

INITIAL_MAP_SIZE = 1 << 30  # address space only: the file grows with what is written


class LmdbWriter(Writer):
    def __init__(self, out: str):
        super().__init__(out)
        self._env: lmdb.Environment | None = None
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
        if images != sum(e.records for e in entries):
            raise PackError(f"{self.partial_path}: {images} images but the journal lists "
                            f"{sum(e.records for e in entries)}; start over without --resume")
        return entries

    def _open(self) -> None:
        size = os.path.getsize(self.partial_path) if os.path.exists(self.partial_path) else 0
        self._map_size = max(INITIAL_MAP_SIZE, 2 * size)
        try:
            self._env = lmdb.open(self.partial_path, subdir=False, lock=False, sync=False,
                                  map_size=self._map_size, readahead=False, meminit=False,
                                  max_dbs=0, max_readers=4)
        except lmdb.Error as exc:
            raise PackError(f"{self.partial_path}: cannot open as LMDB ({exc}); "
                            "start over without --resume") from None
        self._fd = os.open(self.partial_path, os.O_RDONLY)  # only to start writeback early

    def commit(self, images: list[bytes], entry: JournalEntry) -> None:
        def fill(txn: lmdb.Transaction) -> None:
            # Image keys only grow, so append=True skips the B-tree search.
            for k, data in enumerate(images):
                txn.put(image_key(entry.first_record + k), data, append=True)
            txn.put(journal_key(entry.chunk), entry.to_bytes())

        self._write(fill, sum(len(d) for d in images))
        # Writeback of what the commit before this one appended (see Hdf5Writer.commit).
        size = os.fstat(self._fd).st_size
        if self._flushed < self._size:
            start_writeback(self._fd, self._flushed, self._size - self._flushed)
            self._flushed = self._size
        self._size = size

    def finish(self, columns: dict[str, bytes], meta: dict, lengths: list[int]) -> None:
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
        """Run ``fill`` in a write transaction; on a full map, grow it and redo the transaction."""
        while True:
            try:
                with self._env.begin(write=True) as txn:
                    fill(txn)
                return
            except lmdb.MapFullError:
                # The aborted transaction left nothing behind; redo it with room to spare.
                self._map_size = max(2 * self._map_size, self._map_size + 4 * nbytes)
                log.debug("%s: map full, growing it to %d MiB", self.partial_path, self._map_size >> 20)
                self._env.set_mapsize(self._map_size)
            except (lmdb.Error, OSError) as exc:
                raise write_failed(self.partial_path, exc) from None

    def close(self) -> None:
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
