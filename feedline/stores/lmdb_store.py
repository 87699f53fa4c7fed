"""LMDB store: one file, one key per record, columns and metadata under feedline/."""
from __future__ import annotations

import os
import threading

import lmdb

from ..errors import StoreError
from ..format import COLUMN_NAMES, LMDB_COLUMN_PREFIX, LMDB_META_KEY, Columns, image_key, parse_meta
from .base import Store


class LmdbStore(Store):
    """Reads are zero-copy: each thread keeps one read-only transaction open and
    ``read`` returns a memoryview into the memory map, valid until ``close()``."""

    kind = "lmdb"

    def __init__(self, filename: str):
        self.filename = filename
        self._local = threading.local()
        self._env = None
        self._pid = None
        self._lock = threading.Lock()
        env = self._environment()
        with env.begin(buffers=False) as txn:
            raw_meta = txn.get(LMDB_META_KEY)
            if raw_meta is None:
                raise StoreError(f"{filename}: an LMDB file, but not a feedline store (no feedline/meta key)"
                                 + self._partial_hint())
            self.meta = parse_meta(raw_meta, filename)
            buffers = {}
            for name in COLUMN_NAMES:
                value = txn.get(LMDB_COLUMN_PREFIX + name.encode())
                if value is None:
                    raise StoreError(f"{filename}: column {name} is missing; the file is damaged. Pack it again.")
                buffers[name] = value
        self.classes = list(self.meta["classes"])
        self.columns = Columns.from_buffers(buffers, self.meta["count"], filename)

    def _partial_hint(self) -> str:
        return "" if not self.filename.endswith(".partial") else \
            " (an unfinished pack: rerun `feedline pack ... --resume`)"

    def _environment(self) -> lmdb.Environment:
        # A fork copies the parent's handles; LMDB forbids using them in the child.
        if self._env is None or self._pid != os.getpid():
            with self._lock:
                if self._env is None or self._pid != os.getpid():
                    self._local = threading.local()
                    try:
                        self._env = lmdb.open(self.filename, subdir=False, readonly=True, lock=False,
                                              readahead=False, meminit=False, max_readers=1024)
                    except lmdb.Error as exc:
                        raise StoreError(f"{self.filename}: cannot open as LMDB ({exc})") from None
                    self._pid = os.getpid()
        return self._env

    def _txn(self) -> lmdb.Transaction:
        env = self._environment()
        txn = getattr(self._local, "txn", None)
        if txn is None:
            txn = env.begin(buffers=True)
            self._local.txn = txn
        return txn

    def read(self, index: int):
        value = self._txn().get(image_key(self._check(index)))
        if value is None:
            raise StoreError(f"{self.filename}: record {index} is missing; the file is damaged. Pack it again.")
        return value

    def close(self) -> None:
        with self._lock:
            if self._env is not None and self._pid == os.getpid():
                self._env.close()
            self._env = None
            self._local = threading.local()
