"""One pack at a time per output: a lock file beside it (``OUT.partial.lock``, flock).

A second pack to the same output refuses at once, naming the first (its pid, host and
start), before it touches any of the first one's files. The kernel drops a flock when its
holder dies, so a lock file left by a killed pack never blocks the next one. The holder
removes the file while it still holds the lock; a pack that locked a file removed meanwhile
opens the new one instead.
"""
from __future__ import annotations

import datetime
import fcntl
import os
import socket

from feedline.core.errors import PackError

LOCK_SUFFIX = ".lock"


class OutputLock:
    """Held from construction to ``release``; PackError when another pack holds it."""

    def __init__(self, partial_path: str, out: str):
        self.path = partial_path + LOCK_SUFFIX
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read(fd)
                os.close(fd)
                raise PackError(f"{out}: another pack is writing it ({holder or 'its lock: ' + self.path}); "
                                "wait for it to finish or stop it, then pack again") from None
            if _same_file(fd, self.path):
                break
            os.close(fd)   # locked a file its holder removed as it finished: lock the one there now
        started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, started {started}".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        """Remove the lock file and unlock it (again: nothing)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass
        fcntl.flock(fd, fcntl.LOCK_UN)   # before closing: a child forked meanwhile holds a copy of the file
        os.close(fd)


def _read(fd: int) -> str:
    try:
        return os.pread(fd, 200, 0).decode(errors="replace").strip()
    except OSError:
        return ""


def _same_file(fd: int, path: str) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    here = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (st.st_dev, st.st_ino)
