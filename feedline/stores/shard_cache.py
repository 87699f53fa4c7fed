"""A bounded local cache of whole shards, shared by the processes of one machine.

A shard is fetched into ``NAME.partial``, checked (its size, then every record against
the shard's checksums), and renamed to ``NAME``: a file under its own name is complete,
and is not fetched again while it keeps its size. One lock file per shard (``NAME.lock``,
flock) makes a second thread or process (another rank on the same machine) wait for the
first one's fetch instead of fetching it too, for a bounded time. Past ``limit`` bytes,
complete shards are removed least recently used first (use touches a shard's mtime),
sparing the ones this process still needs; a file removed while another process has it
open stays readable to that process (POSIX).
"""
from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager

from ..core.errors import StoreError
from .process_local import ProcessLocal
from .remote import CacheFullError, RemoteError

log = logging.getLogger(__name__)

_PARTIAL, _LOCK = ".partial", ".lock"
_ROOM = "room" + _LOCK   # held while a fetch makes room and reserves it: the limit holds with fetches at once
_POLL_S = (0.002, 0.05)   # a wait for another's fetch looks again after 2 ms, then less often


class ShardCache:
    """Complete shards under ``folder``, at most ``limit`` bytes of them (beyond the ones in use).
    ``wait_s``: the longest a fetch waits for another thread's or process's fetch of the same shard."""

    def __init__(self, folder: str, limit: int, wait_s: float):
        self.folder, self.limit, self.wait_s = folder, limit, wait_s
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            raise CacheFullError(f"{folder}: cannot make the shard cache ({exc.strerror}); set "
                                 "FEEDLINE_CACHE_DIR (or cache_dir) to a writable folder") from None
        self._lock = ProcessLocal(threading.Lock)
        self.fetched_bytes = 0   # by this process, since it opened the cache
        self.fetched: list[str] = []   # the shards this process fetched, in order
        self.peak_bytes = 0      # the most the folder held after one of this process's fetches
        self._warned_over = False

    def path(self, name: str) -> str:
        return os.path.join(self.folder, name)

    def complete(self, name: str) -> bool:
        return os.path.exists(self.path(name))

    def get(self, name: str, size: int | None, fetch: Callable[[str], int], check: Callable[[str], None],
            keep: Iterable[str] = (), before_fetch: Callable[[], None] | None = None) -> str:
        """The path of complete shard ``name``: from the cache, or fetched by ``fetch(dest)``
        (returns the bytes written) into it and passed by ``check(path)`` (raises when bad).
        ``keep``: shards not to evict to make room for this one. ``before_fetch()``: called
        once this caller holds the shard's lock and must fetch (it may raise instead)."""
        path = self.path(name)
        if self._present(path, size):
            return path
        with self._shard_locked(name):
            if self._present(path, size):   # another thread or process fetched it while this one waited
                return path
            if before_fetch is not None:
                before_fetch()
            partial = path + _PARTIAL
            try:
                with self._locked(self.path(_ROOM), "another fetch making room in the cache"):
                    self._make_room(size or 0, {name, *keep})
                    with open(partial, "wb") as fh:   # its room reserved: counted whole by others from now on
                        fh.truncate(size or 0)
                written = fetch(partial)
                if size is not None and written != size:
                    raise ShardDamaged(f"{name}: {written} bytes arrived, the object has {size}")
                check(partial)
                os.replace(partial, path)
            except OSError as exc:
                _remove(partial)
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise CacheFullError(f"{path}: the cache disk is full; free space, lower cache_limit, or set "
                                         "FEEDLINE_CACHE_DIR to a bigger disk") from None
                raise
            except BaseException:
                _remove(partial)
                raise
            with self._lock.get():
                self.fetched_bytes += written
                self.fetched.append(name)
                self.peak_bytes = max(self.peak_bytes, self.used_bytes())
            return path

    def _present(self, path: str, size: int | None) -> bool:
        """Whether a complete copy is there (touched as used); one of another size is damaged: removed."""
        try:
            found = os.path.getsize(path)
        except FileNotFoundError:
            return False
        if size is not None and found != size:
            log.warning("%s: %d bytes in the cache, the object has %d; fetching it again", path, found, size)
            _remove(path)
            return False
        _touch(path)
        return True

    def discard(self, name: str) -> None:
        """Remove a complete shard (found damaged): the next ``get`` fetches it again."""
        with self._shard_locked(name):
            _remove(self.path(name))

    def used_bytes(self) -> int:
        """The bytes the folder holds (shards, those arriving at their whole size, heads), counted
        while no fetch makes room: what the limit bounds."""
        with self._locked(self.path(_ROOM), "another fetch making room in the cache"):
            return sum(size for _, size, _ in self._entries())

    def _entries(self) -> list[tuple[str, int, float]]:
        """(name, bytes, last use) of the complete shards (and any partial being fetched)."""
        found = []
        try:
            with os.scandir(self.folder) as it:
                for entry in it:
                    if entry.name.endswith(_LOCK) or not entry.is_file():
                        continue
                    try:
                        st = entry.stat()
                    except FileNotFoundError:
                        continue
                    found.append((entry.name, st.st_size, st.st_mtime))
        except FileNotFoundError:
            pass
        return found

    def _make_room(self, incoming: int, keep: set[str]) -> None:
        entries = self._entries()
        used = sum(size for _, size, _ in entries) + incoming
        if used <= self.limit:
            return
        for name, size, _ in sorted(entries, key=lambda e: e[2]):
            if name in keep or name.endswith(_PARTIAL) or name.endswith(".head") or used <= self.limit:
                continue
            log.debug("%s: evicting %s (%d bytes) to stay within %d bytes", self.folder, name, size, self.limit)
            _remove(self.path(name))
            used -= size
        if used > self.limit and not self._warned_over:
            self._warned_over = True
            log.warning("%s: the shards in use (%d bytes) exceed cache_limit (%d bytes); raise cache_limit to "
                        "hold at least the shards read at once plus those fetched ahead", self.folder, used,
                        self.limit)

    def _shard_locked(self, name: str):
        return self._locked(self.path(name) + _LOCK, "another fetch of this shard")

    @contextmanager
    def _locked(self, lock_file: str, what: str):
        """The lock ``lock_file``, waited for at most ``wait_s`` (then a RemoteError naming ``what``
        holds it). Unlocked before its file is closed: a child forked meanwhile holds a copy of
        the file, never the lock."""
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline, pause = time.monotonic() + self.wait_s, _POLL_S[0]
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise RemoteError(f"{lock_file}: waited {self.wait_s:.0f} s for {what} (this lock is held): "
                                          "that process may be stopped or hung; end it, or remove the lock file "
                                          "if it is gone") from None
                    time.sleep(pause)
                    pause = min(2 * pause, _POLL_S[1])
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


class ShardDamaged(StoreError):
    """A fetched shard whose size or records do not match what its index and checksums say."""


def _touch(path: str) -> None:
    try:
        os.utime(path)
    except OSError:
        pass


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
