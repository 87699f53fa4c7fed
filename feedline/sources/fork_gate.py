"""What a fork of worker processes needs to leave the child nothing to trip on.

A fork copies every lock of the process as it is at that instant, and only the forking
thread goes on in the child. Two ways a child then waits forever:
- A worker thread halfway through a decode may hold a lock of its library (OpenCV's, a
  codec's): the child waits on it at its first decode. So the CPU engine's worker threads
  enter the gate for each chunk they fill, and a fork waits until none is inside (at most
  ``WAIT_S``: a thread stuck in a user's transform must not stop the fork too), and holds new
  chunks back while it forks.
- The parent's unreachable objects not yet collected (a DALI pipeline a loader left behind)
  are copied too, and the child's garbage collector would run their finalizers there,
  against threads that do not exist in the child (DALI's destructor waits on them for good).
  So the heap is frozen across the fork (``gc.freeze``): the child's collector never looks at
  what it inherited, and the parent's is unfrozen once no fork is under way.
"""
from __future__ import annotations

import gc
import threading
from contextlib import contextmanager

WAIT_S = 5.0


class ForkGate:
    def __init__(self):
        self._changed = threading.Condition()
        self._inside = 0
        self._forking = 0

    @contextmanager
    def working(self):
        """Around a worker thread's chunk: no fork starts while it runs."""
        with self._changed:
            self._changed.wait_for(lambda: not self._forking, timeout=WAIT_S)
            self._inside += 1
        try:
            yield
        finally:
            with self._changed:
                self._inside -= 1
                self._changed.notify_all()

    @contextmanager
    def forking(self):
        """Around a fork: waits until no worker thread is inside a chunk, and freezes the heap."""
        with self._changed:
            self._forking += 1
            self._changed.wait_for(lambda: not self._inside, timeout=WAIT_S)
            gc.freeze()
        try:
            yield
        finally:
            with self._changed:
                self._forking -= 1
                if not self._forking:
                    gc.unfreeze()
                self._changed.notify_all()


GATE = ForkGate()   # one per process: the threads of every loader, the forks of every loader
