"""LMDB store: one file, one key per record, columns and metadata under feedline/."""
from __future__ import annotations

import logging
import os
import threading

import lmdb
import numpy as np

from ..errors import StoreError
from ..fields import per_pixel
from ..format import (LMDB_COLUMN_PREFIX, LMDB_IMAGE_PREFIX, LMDB_JOURNAL_PREFIX, LMDB_META_KEY, MASK_SUFFIX,
                      image_key, parse_meta)
from .advice import merged_ranges, will_need
from .base import Store, column_names, load_columns, load_targets
from .lmdb_layout import LayoutError, key_places, value_places

log = logging.getLogger(__name__)

_lock = threading.Lock()        # guards _shared and every _SharedEnv; replaced in a forked child
_pid = os.getpid()
_shared: dict[tuple[int, int], "_SharedEnv"] = {}


def _after_fork_in_child() -> None:
    # The child has one thread: a lock another parent thread held at the fork would never be released.
    global _lock, _pid
    _lock = threading.Lock()
    _pid = os.getpid()


os.register_at_fork(after_in_child=_after_fork_in_child)


class _SharedEnv:
    """One read-only Environment per data file per process, shared by every LmdbStore
    on that file: py-lmdb refuses a second open of a file in one process, and LMDB
    forbids using a handle inherited over a fork, so the child opens its own."""

    def __init__(self, key: tuple[int, int]):
        self.key = key
        self.users = 0
        self.env: lmdb.Environment | None = None
        self.pid: int | None = None   # the process that opened env
        self.places = None   # (offsets, lengths) of every value once a hint asks; False: unknown


def _open_environment(filename: str) -> lmdb.Environment:
    try:
        env = lmdb.open(filename, subdir=False, readonly=True, lock=False,
                        readahead=False, meminit=False, max_readers=1024)
    except lmdb.Error as exc:
        raise StoreError(f"{filename}: cannot open as LMDB ({exc}); truncated or not an LMDB file") from None
    # LMDB maps pages past the end of a truncated file without complaint, and the
    # first read of one kills the process with SIGBUS: check the length up front.
    needed = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    actual = os.path.getsize(filename)
    if actual < needed:
        env.close()
        raise StoreError(f"{filename}: the file is truncated ({actual} bytes, LMDB needs {needed}). "
                         "Pack it again.")
    return env


class LmdbStore(Store):
    """Reads are zero-copy: each thread keeps one read-only transaction open and
    ``read`` returns a memoryview into the memory map, valid until ``close()`` (or,
    in a forked child, until the child's first read reopens the file)."""

    kind = "lmdb"

    def __init__(self, filename: str):
        self.filename = filename
        self._local = threading.local()
        self._env_share: _SharedEnv | None = None
        env = self._environment()
        try:
            with env.begin(buffers=True) as txn:
                raw_meta = txn.get(LMDB_META_KEY)
                if raw_meta is None:
                    raise StoreError(f"{filename}: an LMDB file, but not a feedline store (no feedline/meta key)"
                                     + self._partial_hint())
                self.meta = parse_meta(bytes(raw_meta), filename)
                buffers = _read_columns(txn, column_names(self.meta), filename, env.stat()["psize"])
            self.classes = list(self.meta["classes"])
            self.columns = load_columns(buffers, self.meta["count"], filename)
            self._targets = load_targets(self.meta, buffers, self.meta["count"], filename)
            self._note_missing_checksums()
        except lmdb.Error as exc:
            self.close()
            raise StoreError(f"{filename}: the LMDB file is damaged ({exc}). Pack it again.") from None
        except StoreError:
            self.close()
            raise

    def _partial_hint(self) -> str:
        return "" if not self.filename.endswith(".partial") else \
            " (an unfinished pack: rerun `feedline pack ... --resume`)"

    def _environment(self) -> lmdb.Environment:
        share = self._env_share
        if share is not None and share.pid == _pid:
            return share.env
        with _lock:
            if self._env_share is None:
                try:
                    st = os.stat(self.filename)
                except OSError as exc:
                    raise StoreError(f"{self.filename}: cannot open ({exc.strerror})") from None
                key = (st.st_dev, st.st_ino)
                share = _shared.setdefault(key, _SharedEnv(key))
                share.users += 1
                self._env_share = share
            share = self._env_share
            if share.pid != _pid:
                if share.env is not None:
                    # Inherited over a fork: closing it only unmaps this process's copy.
                    share.env.close()
                    share.env = None
                try:
                    share.env = _open_environment(self.filename)
                except StoreError:
                    self._env_share = None
                    self._release(share)
                    raise
                share.pid = _pid
            return share.env

    def _txn(self) -> lmdb.Transaction:
        env = self._environment()
        local = self._local
        if getattr(local, "env", None) is not env:  # first read in this thread, or a new env after a fork
            local.txn = env.begin(buffers=True)
            local.env = env
        return local.txn

    def read(self, index: int):
        i = self._check(index)
        return self._value(image_key(i), i, "")

    def read_mask(self, index: int):
        if not per_pixel(self.fields):
            return super().read_mask(index)
        i = self._check(index)
        return self._value(image_key(i) + MASK_SUFFIX, i, ": its mask")

    def _value(self, key: bytes, i: int, what: str):
        try:
            value = self._txn().get(key)
        except lmdb.Error as exc:
            self._drop_txn()  # LMDB invalidates a transaction that met damage: later reads need a new one
            raise StoreError(f"{self.filename}: record {i} ({self.path(i)}){what} cannot be read ({exc}); "
                             "the file is damaged. Pack it again.") from None
        if value is None:
            raise StoreError(f"{self.filename}: record {i} ({self.path(i)}){what} is missing; "
                             "the file is damaged. Pack it again.")
        return value

    def _drop_txn(self) -> None:
        txn = getattr(self._local, "txn", None)
        self._local.env = self._local.txn = None
        if txn is not None:
            try:
                txn.abort()
            except lmdb.Error:
                pass

    def byte_ranges(self, first: int, stop: int) -> list[tuple[str, int, int]]:
        self._check_span(first, stop)
        self._environment()
        share = self._env_share
        if share.places is None:  # two threads may both find them: either result serves
            share.places = _find_places(self)
        if share.places is False or first == stop:
            return []
        offsets, lengths = share.places
        return merged_ranges(self.filename, offsets[first:stop], lengths[first:stop])

    def byte_lengths(self) -> np.ndarray:
        # A lookup touches only B-tree pages: a value's length is in its leaf node.
        txn = self._txn()
        try:
            return np.fromiter((len(txn.get(image_key(i), b"")) for i in range(len(self))),
                               dtype=np.int64, count=len(self))
        except lmdb.Error as exc:
            raise StoreError(f"{self.filename}: cannot read the record index ({exc}); the file is damaged") from None

    def layout_problems(self) -> list[str]:
        try:
            return _key_problems(self._txn(), len(self))
        except lmdb.Error as exc:
            self._drop_txn()
            return [f"cannot walk the keys ({exc}); the file is damaged"]

    def close(self) -> None:
        with _lock:
            share, self._env_share = self._env_share, None
            self._local = threading.local()
            if share is not None:
                self._release(share)

    @staticmethod
    def _release(share: _SharedEnv) -> None:
        """Drop one user of ``share``; the last one closes the environment. Hold _lock."""
        share.users -= 1
        if share.users > 0:
            return
        if _shared.get(share.key) is share:
            del _shared[share.key]
        if share.env is not None:
            share.env.close()
            share.env = None
        share.pid = None


def _find_places(store: LmdbStore):
    """Where every value lies (see lmdb_layout), checked against two reads; False when the
    pages do not read as expected: then there are no hints, and reads go on."""
    try:
        stat = store._environment().stat()
        offsets, lengths = value_places(store.filename, stat["psize"], len(store), stat["leaf_pages"])
        with open(store.filename, "rb") as fh:
            for i in {0, len(store) - 1}:
                fh.seek(offsets[i])
                if fh.read(lengths[i]) != bytes(store.read(i)):
                    raise LayoutError(f"record {i} is not where its leaf node says")
        return offsets, lengths
    except (LayoutError, OSError, StoreError, lmdb.Error) as exc:
        log.info("%s: no read-ahead hints (%s)", store.filename, exc)
        return False


def _read_columns(txn: lmdb.Transaction, names, filename: str, psize: int) -> dict[str, bytes]:
    """The columns' bytes, copied out of the map. Their places are found in the B-tree and
    advised first: LMDB reads a cold value a page fault at a time (a million records hold
    some 60 MB of columns: a second that way, a tenth of one advised)."""
    keys = [LMDB_COLUMN_PREFIX + name.encode() for name in names]
    try:
        will_need([(filename, offset, length) for offset, length in key_places(filename, psize, keys).values()])
    except (LayoutError, OSError) as exc:
        log.debug("%s: columns not advised (%s)", filename, exc)
    buffers = {}
    for name, key in zip(names, keys):
        value = txn.get(key)
        if value is None:
            raise StoreError(f"{filename}: column {name} is missing; the file is damaged. Pack it again.")
        buffers[name] = bytes(value)
    return buffers


def _key_problems(txn: lmdb.Transaction, n: int) -> list[str]:
    """Image (and mask) keys beyond the ``n`` records, and journal keys of an unfinished pack."""
    stored = extra = journal = 0
    cursor = txn.cursor()
    if cursor.set_range(LMDB_IMAGE_PREFIX):
        for key in cursor.iternext(keys=True, values=False):
            key = bytes(key)
            if not key.startswith(LMDB_IMAGE_PREFIX):
                break
            stored += 1
            suffix = key[len(LMDB_IMAGE_PREFIX):].removesuffix(MASK_SUFFIX)   # a mask's key: its image's + suffix
            if not (suffix.isdigit() and int(suffix) < n and image_key(int(suffix)) == key.removesuffix(MASK_SUFFIX)):
                extra += 1
    if cursor.set_range(LMDB_JOURNAL_PREFIX):
        for key in cursor.iternext(keys=True, values=False):
            if not bytes(key).startswith(LMDB_JOURNAL_PREFIX):
                break
            journal += 1
    problems = []
    if extra:
        problems.append(f"{extra} image key(s) beyond the {n} records the metadata counts "
                        f"({stored} image keys stored)")
    if journal:
        problems.append(f"{journal} pack journal key(s) left: the pack did not finish")
    return problems
