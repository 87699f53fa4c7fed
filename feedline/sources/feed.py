"""The consumer's side of the CPU engine, and the one owner of the ring's Slots while a run
lasts: it plans each batch, in order, into a free Slot and hands it to the queue that has
the workers fill it (dispatch.py), then gives the filled Slots back in the same order, and
takes each back when it is released. Planning runs here, on the consumer's thread: the
workers only read, decode, transform and write.

The data flows one way: plan -> load a free Slot (its labels and targets) -> the workers
fill it -> the Finisher finishes it -> released here.
"""
from __future__ import annotations

import collections
from typing import Iterator, Protocol

from ..planning.plan import BatchPlan
from .ring import Ring
from .slot import Slot
from .target_batches import TargetSpec, plan_targets


class BatchQueue(Protocol):
    """What fills the Slots a Feed plans (dispatch.ChunkQueue)."""

    def submit(self, slot: Slot) -> None: ...

    def fail(self, error: BaseException) -> None: ...

    def next_filled(self, block: bool = True) -> Slot | None: ...


class Feed:
    """Keeps every free Slot of ``ring`` planned and submitted to ``queue``. Not thread-safe:
    one consumer calls it. ``targets``: the targets beyond the label, or None."""

    def __init__(self, queue: BatchQueue, plans: Iterator[BatchPlan], ring: Ring, targets: TargetSpec | None = None):
        self._queue, self._plans, self._ring, self._targets = queue, plans, ring, targets
        self._free = collections.deque(range(ring.slots))
        self._ended = False

    def _top_up(self) -> None:
        while self._free and not self._ended:
            try:
                plan = next(self._plans)
                slot = self._ring.slot(self._free[0])
            except StopIteration:
                self._ended = True
                return
            except Exception as exc:  # planning or allocating a batch failed: heard in order
                self._ended = True
                self._queue.fail(exc)
                return
            slot.load(plan)
            plan_targets(self._targets, slot)   # targets beyond the label: none for a label-only store
            self._free.popleft()
            self._queue.submit(slot)

    def next_filled(self, block: bool = True) -> Slot | None:
        """The oldest submitted Slot once it is filled; None at the end of the epoch (or,
        with block=False, when it is not ready yet). Raises the engine's errors in order."""
        self._top_up()
        return self._queue.next_filled(block)

    def release(self, slot: Slot) -> None:
        """The consumer is done with ``slot``: it is planned into at the next call."""
        self._free.append(slot.number)
