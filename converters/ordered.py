"""Map over items in order: a cheap first step on the calling thread, the slow second
step on a thread pool, results in input order, a bounded number in flight.

Why not everything on the pool: checking a JPEG that is stored as it is costs a few
tens of microseconds of mostly Python work, and threads doing that contend for the
GIL, so a pool checks such files more slowly than one thread does. Conversions
(Pillow/OpenCV decode and encode, which release the GIL) are the work that gains from
more cores, so only they go to the pool, which is started by the first of them: a pack
of JPEGs stored as they are starts no thread and does not import concurrent.futures.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any


class _Done:
    """A result computed on the calling thread, with the part of Future's interface that
    ``map`` uses."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def done(self) -> bool:
        return True

    def result(self):
        return self.value

    def cancel(self) -> bool:
        return False


class OrderedPool:
    """Owns its threads: started with the first deferred item (never when ``jobs == 1``),
    stopped and joined by ``close()``, which cancels what has not started. At most
    ``window`` results wait in order, so memory stays bounded when a slow item holds the head."""

    def __init__(self, jobs: int, window: int | None = None):
        self._jobs = jobs
        self._window = window or max(64, 8 * jobs)
        self._executor = None

    def map(self, items: Iterable, first: Callable[[Any], Any], second: Callable[[Any], Any],
            defer: type | tuple[type, ...]) -> Iterator:
        """``first(item)`` for each item; results that are a ``defer`` instance (``defer``
        is a type or a tuple of types) are replaced by ``second(result)``, computed on the
        pool. Yields in input order."""
        if self._jobs == 1:
            for item in items:
                result = first(item)
                yield second(result) if isinstance(result, defer) else result
            return
        pending: deque = deque()
        try:
            for item in items:
                result = first(item)
                pending.append(self._submit(second, result) if isinstance(result, defer) else _Done(result))
                while pending and (len(pending) >= self._window or pending[0].done()):
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for entry in pending:
                entry.cancel()

    def _submit(self, fn: Callable[[Any], Any], arg):
        if self._executor is None:
            from concurrent.futures import ThreadPoolExecutor
            self._executor = ThreadPoolExecutor(self._jobs, thread_name_prefix="feedline-pack")
        return self._executor.submit(fn, arg)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def __enter__(self) -> "OrderedPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

