"""Run a generator on its own thread, ``depth`` items ahead of the consumer."""
from __future__ import annotations

import queue
import threading
from typing import Iterator

_DONE = object()


def ahead(items: Iterator, depth: int, name: str) -> Iterator:
    """The items of ``items``, produced on a thread named ``name`` into a queue of ``depth``.

    The thread has one owner, this generator: closing it (or a ``break``) stops the thread
    and joins it; an exception on the thread reaches the consumer in order, after the
    items produced before it.
    """
    out: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        out.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            out.put(_DONE)
        except BaseException as exc:  # reaches the consumer
            out.put(exc)

    thread = threading.Thread(target=produce, name=name, daemon=True)
    thread.start()
    try:
        while (item := out.get()) is not _DONE:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # a producer blocked on a full queue needs room to see the stop
            try:
                out.get_nowait()
            except queue.Empty:
                thread.join(timeout=0.1)
