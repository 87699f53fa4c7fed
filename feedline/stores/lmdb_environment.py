"""One read-only LMDB environment per data file per process, and each thread's transaction
on it (lmdb_store.py reads through a Reader). py-lmdb refuses a second open of a file in one
process, and a forked child must never close, free or use the locks of what it inherited:
a child adopts an environment inherited over the fork (read-only, without LMDB's lock
table), begins its own transactions on it, and never closes it."""
from __future__ import annotations

import logging
import os
import threading

import lmdb

from ..core.errors import StoreError
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


class Reader:
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
