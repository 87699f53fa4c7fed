"""The consumer's side of the decode threads: it plans each batch, in order, into a free
slot of the ring and hands it to the decode queue, then takes the filled batches back in
the same order. Planning runs here, on the consumer's thread and outside the queue's lock:
the decode threads only read, decode and write.

The data flows one way: plan -> submit (plan and slot) -> decode threads fill the slot ->
the consumer (or the CUDA prefetcher) takes it -> release the slot.
"""
from __future__ import annotations

import collections
from typing import Iterator

from ..plan import BatchPlan
from .decode_queue import DecodeQueue, Job
from .target_batches import plan_targets


class Feed:
    """Keeps every free slot of ``ring`` planned and submitted to ``queue``. Not thread-safe:
    one consumer calls it."""

    def __init__(self, queue: DecodeQueue, plans: Iterator[BatchPlan], ring, draw=None):
        self._queue, self._plans, self._ring = queue, plans, ring
        self._draw = draw   # plan -> the per-sample transforms' parameters (transforming.py), or None
        self._free = collections.deque(range(ring.slots))
        self._ended = False

    def _top_up(self) -> None:
        while self._free and not self._ended:
            try:
                plan = next(self._plans)
                target = self._ring.target(self._free[0])
            except StopIteration:
                self._ended = True
                return
            except Exception as exc:  # planning or allocating a batch failed: heard in order
                self._ended = True
                self._queue.fail(exc)
                return
            target.labels[:len(plan)] = plan.labels
            plan_targets(target, plan)   # targets beyond the label: none for a label-only store
            if self._draw is not None:  # transforms: drawn here, once per batch, applied by the workers
                target.drawn = self._draw(plan)
            self._queue.submit(plan, target, self._free.popleft())

    def next_filled(self, block: bool = True) -> Job | None:
        """The oldest submitted batch once it is filled; None at the end of the epoch (or,
        with block=False, when it is not ready yet). Raises a decode thread's error."""
        self._top_up()
        return self._queue.next_filled(block)

    def release(self, slot: int) -> None:
        """The consumer is done with ``slot``: it is planned into at the next call."""
        self._free.append(slot)
