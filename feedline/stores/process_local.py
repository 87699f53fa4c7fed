"""State that belongs to the process that made it.

A forked child inherits a copy of its parent's memory but none of its other threads: a lock
one of them held stays held, an LMDB read one of them was inside never ends, a client's
runtime threads are gone. So a child never touches what it inherited, not even to close it,
and no destructor of it runs there: every value made here stays referenced (to the end of
the process, exit included) until the process that made it lets it go, and a process with
another pid makes its own the first time it asks. Nothing runs at the fork itself: no
``os.register_at_fork`` hook, so forking costs nothing and is never blocked by a store.
"""
from __future__ import annotations

import ctypes
import itertools
import os
import threading
import weakref
from typing import Callable, Generic, TypeVar

T = TypeVar("T")

_locks: dict[int, threading.RLock] = {}          # pid -> that process's lock; ancestors' entries left alone
_values: dict[int, dict[int, object]] = {}      # serial -> {pid of the maker: value}
_serials = itertools.count()
_dropped: dict[int, list] = {}   # pid -> (release, value) of holders collected there, released at a safe point
# One reference each never dropped: emptying the module at exit must not free (destroy) the
# values a forked child inherited. The owner's values are let go by their owner, or at exit with it.
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_values))
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_dropped))


def process_lock() -> threading.RLock:
    """A lock of this process, never one inherited over a fork (a parent's thread may have held it)."""
    pid = os.getpid()
    lock = _locks.get(pid)
    if lock is None:
        lock = _locks.setdefault(pid, threading.RLock())   # atomic: two threads get the same one
    return lock


class ProcessLocal(Generic[T]):
    """One value per process, made by ``make()`` on the first ``get`` in that process.

    ``release(value)`` (optional) lets go of a value whose holder was garbage collected, in
    the process that made it only, and not from the collector (it may run while this very
    thread holds a lock that ``release`` takes): at the next ``get`` that makes a value, or
    ``take``, in that process. Thread-safe."""

    def __init__(self, make: Callable[[], T], release: Callable[[T], None] | None = None):
        self._make = make
        self._serial = next(_serials)
        self._owned: tuple[int, T] | None = None   # (pid, value): read in one step
        # Not at exit: values left then go with the process.
        weakref.finalize(self, _forget, self._serial, release).atexit = False

    def get(self) -> T:
        owned = self._owned
        pid = os.getpid()
        if owned is not None and owned[0] == pid:
            return owned[1]
        release_dropped()
        with process_lock():
            owned = self._owned
            if owned is None or owned[0] != pid:
                value = self._make()
                _values.setdefault(self._serial, {})[pid] = value
                owned = self._owned = (pid, value)
            return owned[1]

    def peek(self) -> T | None:
        """This process's value, or None when it has not made one (nothing is made)."""
        owned = self._owned
        return owned[1] if owned is not None and owned[0] == os.getpid() else None

    def take(self) -> T | None:
        """This process's value, handed to the caller to close (the next ``get`` makes a new
        one); None when this process made none. An inherited value stays where it is."""
        release_dropped()
        pid = os.getpid()
        with process_lock():
            owned = self._owned
            if owned is None or owned[0] != pid:
                return None
            self._owned = None
            return _values.get(self._serial, {}).pop(pid, owned[1])

    def __reduce__(self):
        raise TypeError("state of one process does not travel to another (pickled for a spawned process): "
                        "open the store there by its file name")

    def inherited(self) -> list[T]:
        """The values this process inherited from the processes it was forked from: to be
        read, never changed or closed."""
        pid = os.getpid()
        return [value for maker, value in list(_values.get(self._serial, {}).items()) if maker != pid]


def release_dropped() -> None:
    """Release the values of this process whose holders were collected (their releases wait
    for a call like this, made where no lock is held)."""
    dropped = _dropped.get(os.getpid())
    while dropped:
        release, value = dropped.pop()
        release(value)


def _forget(serial: int, release: Callable | None) -> None:
    pid = os.getpid()
    made = _values.get(serial, {})
    value = made.pop(pid, None)   # only this process's own
    if not made:
        _values.pop(serial, None)
    if value is not None and release is not None:
        _dropped.setdefault(pid, []).append((release, value))
