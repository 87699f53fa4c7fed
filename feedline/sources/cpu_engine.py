"""CpuBatches: the CPU engine. Workers (threads or processes: the runner is a parameter)
fill a ring of Slots with the one sample path; the consumer plans and finishes.

    plan (the consumer: order, crops, flips, labels, targets, once per batch) -> chunks of
    the plan to the workers (dispatch.py) -> each worker reads, decodes, substitutes,
    transforms and writes its samples straight into the Slot's memory (fill.py) -> the
    facts come back -> the Finisher finishes the filled Slot -> it is released back to the
    ring and planned into again.
"""
from __future__ import annotations

import collections
import time
import weakref
from typing import Iterator

import torch

from ..planning.plan import EpochPlan
from ..core.stats import LoaderStats
from .dispatch import ChunkQueue
from .feed import Feed
from .policy import BadRecords
from .readahead import read_ahead
from .ring import ArenaRing
from .target_batches import TargetSpec
from .workers import Workers

LENT = 2   # a host batch the consumer holds, and the one before it, are still its own


class CpuBatches:
    """A BatchSource of ``workers`` writing into a ring of Slots in shared ``memory``. One
    ``run`` at a time; the workers live until ``close()``."""

    def __init__(self, store, workers: Workers, memory: ArenaRing, finisher, targets: TargetSpec | None,
                 bad_records: BadRecords, timeout_s: float = 0.0):
        self.store, self.workers, self.memory, self.finisher = store, workers, memory, finisher
        self.targets, self.bad_records, self.timeout_s = targets, bad_records, timeout_s
        self._closer = weakref.finalize(self, workers.close)   # a loader left to the collector stops its workers
        workers.start()   # now, before the training process initializes CUDA (a forked worker must not inherit it)

    @property
    def ring(self):
        return self.memory.ring

    @property
    def decoder(self):
        """The per-image decoder the workers run."""
        return self.workers.spec.decoder

    def run(self, epoch: EpochPlan, start: int, stats: LoaderStats) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        store = self.store
        if self.memory.ring.size != tuple(epoch.spec.size):   # a size schedule moved: a new ring, the old one freed first
            self.memory = self.memory.resized(epoch.spec.size)
        samples = epoch.samples(len(store))   # the epoch's order, computed once: for the plans and the read-ahead
        plans = epoch.batches(store.labels, store.sizes, start, samples=samples)
        policy = self.bad_records.policy(epoch, stats.ledger)
        # The read-ahead hints the store about the runs read next: speed, never data.
        with read_ahead(store, epoch, start, samples) as ahead:
            queue = ChunkQueue(self.workers, epoch, policy, stats, self.targets, self.timeout_s)
            feed = Feed(queue, ahead.follow(plans), self.memory.ring, self.targets)
            whole = False
            try:
                yield from deliver(feed, self.finisher, stats)
                whole = True
            except GeneratorExit:   # closed at a yield (a break, an abandoned iterator): between two steps
                whole = True
                raise
            finally:
                self.workers.end_run(whole, self.timeout_s)

    def close(self) -> None:
        """Stop and join the workers; the ring's memory goes with the last tensor over it."""
        self._closer()

    def __repr__(self) -> str:
        return f"CpuBatches({self.workers.spec.decoder!r}, {self.workers.count} {self.workers.kind}s)"


def deliver(feed: Feed, finisher, stats: LoaderStats) -> Iterator:
    """The filled Slots of ``feed``, in order, through ``finisher``. A Slot goes back to the
    feed once nothing reads it: a copied Slot once its copy has finished (the finisher's
    ``copied`` event); a Slot whose tensors were handed over when the consumer asks for the
    batch after next (by then it has let go of them, unless it keeps them: the ring then
    sees that). A finisher that ``overlaps`` gets the next Slot as soon as it is filled, so
    its work overlaps the consumer's step."""
    waiting = collections.deque()   # finished, not yet handed over
    copying = collections.deque()   # finished, their Slots' copy may still run
    lent = collections.deque()      # handed over as views of their Slots

    def accept(slot) -> None:
        t0 = time.perf_counter()
        finished = finisher.finish(slot)
        if finished.copied is not None:
            stats.add(copy_s=time.perf_counter() - t0)   # enqueue time: the copy itself is asynchronous
            copying.append(finished)
        waiting.append(finished)

    def release(wait: bool) -> None:
        while copying and finisher.copied(copying[0], wait):
            feed.release(copying.popleft().slot)
        while len(lent) >= LENT:
            feed.release(lent.popleft())

    try:
        while True:
            release(wait=False)
            if not waiting:
                release(wait=True)  # workers need free slots to make progress
                slot = feed.next_filled(block=True)
                if slot is None:
                    return
                accept(slot)
            if finisher.overlaps and (ahead := feed.next_filled(block=False)) is not None:
                accept(ahead)   # overlap the next copy with this step
            finished = waiting.popleft()
            if finished.copied is None:
                lent.append(finished.slot)
            yield finisher.hand_over(finished)
    finally:
        release(wait=True)  # no copy may still read a slot the workers refill
