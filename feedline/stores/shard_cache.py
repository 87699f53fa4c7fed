"""A bounded local cache of whole shards, shared by the processes of one machine.

A shard is fetched into ``NAME.partial``, checked (its size, then every record against
the shard's checksums), and renamed to ``NAME``: a file under its own name is complete,
and is never fetched again. One lock file per shard (``NAME.lock``, flock) makes a second
process (another rank on the same machine) wait for the first one's fetch instead of
fetching it too. Past ``limit`` bytes, complete shards are removed least recently used
first (use touches a shard's mtime), sparing the ones this process still needs; a file
removed while another process has it open stays readable to that process (POSIX).
"""
from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
from collections.abc import Callable, Iterable
from contextlib import contextmanager

from ..errors import StoreError
from .remote import CacheFullError

log = logging.getLogger(__name__)

_PARTIAL, _LOCK = ".partial", ".lock"
# The lock files open in this process. A flock belongs to the open file, which a fork
# shares: a child keeping the copy of one a parent's thread held at the fork would hold
# that shard's lock for as long as it lives, so the child closes its copies at once.
_held: set[int] = set()


def _after_fork_in_child() -> None:
    for fd in list(_held):
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


class ShardCache:
    """Complete shards under ``folder``, at most ``limit`` bytes of them (beyond the ones in use)."""

    def __init__(self, folder: str, limit: int):
        self.folder, self.limit = folder, limit
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            raise CacheFullError(f"{folder}: cannot make the shard cache ({exc.strerror}); set "
                                 "FEEDLINE_CACHE_DIR (or cache_dir) to a writable folder") from None
        self._lock = threading.Lock()
        self.fetched_bytes = 0   # by this process, since it opened the cache
        self.fetched: list[str] = []   # the shards this process fetched, in order
        self.peak_bytes = 0      # the most the folder held after one of this process's fetches
        self._warned_over = False

    def path(self, name: str) -> str:
        return os.path.join(self.folder, name)

    def complete(self, name: str) -> bool:
        return os.path.exists(self.path(name))

    def get(self, name: str, size: int | None, fetch: Callable[[str], int], check: Callable[[str], None],
            keep: Iterable[str] = ()) -> str:
        """The path of complete shard ``name``: from the cache, or fetched by ``fetch(dest)``
        (returns the bytes written) into it and passed by ``check(path)`` (raises when bad).
        ``keep``: shards not to evict to make room for this one."""
        path = self.path(name)
        if os.path.exists(path):
            _touch(path)
            return path
        with self._locked(name):
            if os.path.exists(path):   # another process fetched it while this one waited
                _touch(path)
                return path
            self._make_room(size or 0, {name, *keep})
            partial = path + _PARTIAL
            try:
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
            with self._lock:
                self.fetched_bytes += written
                self.fetched.append(name)
                self.peak_bytes = max(self.peak_bytes, self.used_bytes())
            return path

    def discard(self, name: str) -> None:
        """Remove a complete shard (found damaged): the next ``get`` fetches it again."""
        with self._locked(name):
            _remove(self.path(name))

    def used_bytes(self) -> int:
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

    @contextmanager
    def _locked(self, name: str):
        fd = os.open(self.path(name) + _LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        _held.add(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            _held.discard(fd)
            os.close(fd)   # releases the lock


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
