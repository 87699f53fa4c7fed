"""LMDB store: one file, one key per record, columns and metadata under feedline/."""
from __future__ import annotations

import logging
import os
import threading
from functools import partial

import lmdb
import numpy as np

from ..errors import StoreError
from ..format import LMDB_COLUMN_PREFIX, LMDB_IMAGE_PREFIX, LMDB_JOURNAL_PREFIX, LMDB_META_KEY, image_key, parse_meta
from .advice import merged_ranges, will_need
from .base import Store, column_names, load_columns, load_targets
from .lmdb_layout import LayoutError, key_places, value_places
from .process_local import ProcessLocal

log = logging.getLogger(__name__)


class _SharedEnv:
    """One read-only Environment per data file per process, shared by every LmdbStore on
    that file (py-lmdb refuses a second open of a file in one process)."""

    def __init__(self, key: tuple[int, int], env: lmdb.Environment, needed: int, inherited: bool):
        self.key, self.env, self.needed, self.inherited = key, env, needed, inherited   # needed: bytes
        self.users = 0
        self.places = None   # (offsets, lengths) of every value once a hint asks; False: unknown


class _Files:
    """This process's open environments, by (device, inode)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.shared: dict[tuple[int, int], _SharedEnv] = {}


_files: ProcessLocal[_Files] = ProcessLocal(_Files)


def _inherited_share(key: tuple[int, int]) -> _SharedEnv | None:
    """The environment on file ``key`` that a process this one was forked from had open.

    A forked child may neither close it (py-lmdb waits there for the reads that the parent's
    threads were in at the fork, which never end here) nor open the file again while it is
    open (py-lmdb refuses a second open of one file in a process, and the fork copied its
    list). So the child begins its own transactions on it: opened read-only and without
    LMDB's lock table, an environment is a read-only map of the file and a read transaction
    a pointer to its newest meta page, nothing tied to the process that opened it."""
    for files in _files.inherited():
        share = files.shared.get(key)   # a copy frozen at the fork: read without its lock
        if share is not None:
            return share
    return None


class _Reader:
    """One store's reading in one process: its share of the file's environment and one read
    transaction per thread. The transactions are held here, not in the threads: a forked
    child would otherwise free its parent's threads' ones (their threads are not copied)."""

    def __init__(self, filename: str):
        try:
            st = os.stat(filename)
        except OSError as exc:
            raise StoreError(f"{filename}: cannot open ({exc.strerror})") from None
        key = (st.st_dev, st.st_ino)
        files = _files.get()
        with files.lock:
            share = files.shared.get(key)
            if share is None:
                share = _adopt(_inherited_share(key), filename) or _SharedEnv(key, *_open_environment(filename), False)
                files.shared[key] = share
            share.users += 1
        self.files, self.share = files, share
        self.lock = threading.Lock()
        self.txns: dict[int, lmdb.Transaction] = {}   # thread ident -> its read transaction

    def txn(self) -> lmdb.Transaction:
        txn = self.txns.get(threading.get_ident())
        if txn is None:
            txn = self.share.env.begin(buffers=True)
            with self.lock:
                live = {t.ident for t in threading.enumerate()}
                for ident in [i for i in self.txns if i not in live]:   # threads that ended
                    _abort(self.txns.pop(ident))
                self.txns[threading.get_ident()] = txn
        return txn

    def drop_txn(self) -> None:
        """LMDB invalidates a transaction that met damage: this thread's next read begins a new one."""
        with self.lock:
            txn = self.txns.pop(threading.get_ident(), None)
        if txn is not None:
            _abort(txn)

    def close(self) -> None:
        """Abort the transactions; the last user of the environment closes it."""
        with self.lock:
            txns, self.txns = list(self.txns.values()), {}
        for txn in txns:
            _abort(txn)
        files, share = self.files, self.share
        with files.lock:
            share.users -= 1
            if share.users > 0:
                return
            if files.shared.get(share.key) is share:
                del files.shared[share.key]
            if not share.inherited:   # an inherited one stays open, and referenced, for good
                share.env.close()   # under the lock: a store opening the file next opens it anew


def _abort(txn: lmdb.Transaction) -> None:
    try:
        txn.abort()
    except lmdb.Error:
        pass


def _adopt(inherited: _SharedEnv | None, filename: str) -> _SharedEnv | None:
    """This process's share of an inherited environment, its file checked again for length."""
    if inherited is None:
        return None
    _check_length(filename, inherited.needed)
    return _SharedEnv(inherited.key, inherited.env, inherited.needed, True)


def _open_environment(filename: str) -> tuple[lmdb.Environment, int]:
    """The file's environment, and the bytes the file must hold."""
    try:
        env = lmdb.open(filename, subdir=False, readonly=True, lock=False,
                        readahead=False, meminit=False, max_readers=1024)
    except lmdb.Error as exc:
        raise StoreError(f"{filename}: cannot open as LMDB ({exc}); truncated or not an LMDB file") from None
    # LMDB maps pages past the end of a truncated file without complaint, and the
    # first read of one kills the process with SIGBUS: check the length up front.
    needed = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    try:
        _check_length(filename, needed)
    except StoreError:
        env.close()
        raise
    return env, needed


def _check_length(filename: str, needed: int) -> None:
    actual = os.path.getsize(filename)
    if actual < needed:
        raise StoreError(f"{filename}: the file is truncated ({actual} bytes, LMDB needs {needed}). "
                         "Pack it again.")


class LmdbStore(Store):
    """Reads are zero-copy: each thread keeps one read-only transaction open and
    ``read`` returns a memoryview into the memory map, valid until ``close()``. A forked
    child begins its own transactions at its first read and never closes what it inherited."""

    kind = "lmdb"

    def __init__(self, filename: str):
        self.filename = filename
        self._reader: ProcessLocal[_Reader] = ProcessLocal(partial(_Reader, filename), _Reader.close)
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
        return self._reader.get().share.env

    def read(self, index: int):
        i = self._check(index)
        try:
            value = self._reader.get().txn().get(image_key(i))
        except lmdb.Error as exc:
            self._reader.get().drop_txn()
            raise StoreError(f"{self.filename}: record {i} ({self.path(i)}) cannot be read ({exc}); "
                             "the file is damaged. Pack it again.") from None
        if value is None:
            raise StoreError(f"{self.filename}: record {i} ({self.path(i)}) is missing; "
                             "the file is damaged. Pack it again.")
        return value

    def byte_ranges(self, first: int, stop: int) -> list[tuple[str, int, int]]:
        self._check_span(first, stop)
        share = self._reader.get().share
        if share.places is None:  # two threads may both find them: either result serves
            share.places = _find_places(self)
        if share.places is False or first == stop:
            return []
        offsets, lengths = share.places
        return merged_ranges(self.filename, offsets[first:stop], lengths[first:stop])

    def byte_lengths(self) -> np.ndarray:
        # A lookup touches only B-tree pages: a value's length is in its leaf node.
        txn = self._reader.get().txn()
        try:
            return np.fromiter((len(txn.get(image_key(i), b"")) for i in range(len(self))),
                               dtype=np.int64, count=len(self))
        except lmdb.Error as exc:
            raise StoreError(f"{self.filename}: cannot read the record index ({exc}); the file is damaged") from None

    def layout_problems(self) -> list[str]:
        reader = self._reader.get()
        try:
            return _key_problems(reader.txn(), len(self))
        except lmdb.Error as exc:
            reader.drop_txn()
            return [f"cannot walk the keys ({exc}); the file is damaged"]

    def close(self) -> None:
        """Release this process's handles (reading again reopens them); a forked child's
        inherited ones are not its to close."""
        reader = self._reader.take()
        if reader is not None:
            reader.close()


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
    """Image keys beyond the ``n`` records, and journal keys of an unfinished pack."""
    stored = extra = journal = 0
    cursor = txn.cursor()
    if cursor.set_range(LMDB_IMAGE_PREFIX):
        for key in cursor.iternext(keys=True, values=False):
            key = bytes(key)
            if not key.startswith(LMDB_IMAGE_PREFIX):
                break
            stored += 1
            suffix = key[len(LMDB_IMAGE_PREFIX):]
            if not (suffix.isdigit() and int(suffix) < n and image_key(int(suffix)) == key):
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
