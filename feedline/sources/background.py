"""Run a generator on its own thread, ``depth`` items ahead of the consumer."""
from __future__ import annotations

import queue
import threading
from typing import Iterator

from .shutdown import close_at_exit

_DONE = object()


class _Producer:
    """The thread that runs ``items`` into a bounded queue; ``close()`` stops and joins it."""

    def __init__(self, items: Iterator, depth: int, name: str):
        self.out: queue.Queue = queue.Queue(maxsize=depth)
        self._items = items
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name=name, daemon=True)
        self._thread.start()
        close_at_exit(self)

    def _produce(self) -> None:
        try:
            for item in self._items:
                while not self._stop.is_set():
                    try:
                        self.out.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
            self.out.put(_DONE)
        except BaseException as exc:  # reaches the consumer
            self.out.put(exc)

    def close(self) -> None:
        self._stop.set()
        while self._thread.is_alive():  # a producer blocked on a full queue needs room to see the stop
            try:
                self.out.get_nowait()
            except queue.Empty:
                self._thread.join(timeout=0.1)


def ahead(items: Iterator, depth: int, name: str) -> Iterator:
    """The items of ``items``, produced on a thread named ``name`` into a queue of ``depth``.

    The thread has one owner, this generator: closing it (or a ``break``) stops the thread
    and joins it; an exception on the thread reaches the consumer in order, after the
    items produced before it.
    """
    producer = _Producer(items, depth, name)
    try:
        while (item := producer.out.get()) is not _DONE:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        producer.close()
