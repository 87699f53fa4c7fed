"""ProcessBatches: worker processes fill a ring of shared-memory Slots; the consumer plans.

    plan (the consumer: order, crops, flips, labels, targets, once per batch) -> chunks of
    the plan to each worker (plans in) -> the workers read, decode, transform and write
    each sample straight into the Slot's shared memory -> slot done (numbers out) -> the
    Finisher finishes the Slot -> released back to the ring and planned into again.

A worker is a process with its own GIL (worker_process.py): ``num_workers`` of them, each
decoding its share of every batch, living as long as the engine, across epochs. The consumer's
work per image is a few bytes of plan: the per-image Python (reads, splices, resizes, a
user's transform) runs where it scales with the cores.
"""
from __future__ import annotations

import collections
import itertools
import os
import weakref
from dataclasses import dataclass
from typing import Iterator

import torch

from ..config import LoaderConfig
from ..decoders.base import Decoder
from ..plan import EpochPlan
from ..stats import LoaderStats
from .cuda_finisher import device_batches_bytes
from .feed import Feed
from .host_pinning import HostPinning
from .parts import EngineParts
from .policy import BadRecordPolicy
from .readahead import read_ahead
from .ring import Ring, ring_slots
from .shared_ring import SharedRing, writes_normalized
from .slot import Slot
from .target_batches import substitute_targets
from .threads import deliver
from .watchdog import Watchdog
from .worker_pool import WorkerPool
from .worker_process import Chunk, ChunkDone, WorkerSetup

CHUNKS_PER_WORKER = 4   # a batch is cut into about this many chunks per worker: balance, few messages
DRAIN_S = 30.0          # an abandoned run's workers each finish the sample they are on within this

@dataclass
class _Job:
    slot: Slot | None    # None: a batch that could not be made (``fail``)
    left: int
    error: BaseException | None = None


class WorkerQueue:
    """The workers' side of a run, as the decode queue is the threads': each submitted Slot's
    chunks go to the workers, and the filled Slots come back in order. The Feed (feed.py)
    plans the Slots and drives it, as it drives the thread engine's queue."""

    def __init__(self, pool: WorkerPool, shared: SharedRing, epoch: EpochPlan, policy: BadRecordPolicy,
                 stats: LoaderStats, store, timeout_s: float = 0.0):
        self._pool, self._shared = pool, shared
        self._epoch, self._policy, self._stats, self._store = epoch, policy, stats, store
        self._jobs: collections.deque[_Job] = collections.deque()
        self._pending: dict[int, _Job] = {}
        self._queued = [0] * pool.count      # chunks sent to each worker, not answered yet
        self._tickets, self._watchdog = itertools.count(), Watchdog(pool, timeout_s)
        self.generation = pool.new_generation()

    def fail(self, error: BaseException) -> None:
        """The next batch cannot be made: the consumer gets ``error`` after the batches before it."""
        self._jobs.append(_Job(None, 0, error))

    def submit(self, slot: Slot) -> None:
        """The batch's chunks, each sent at once to the worker with the fewest waiting: the
        workers go on decoding every planned batch of the ring while the consumer is away (a
        training step, a batch transform), as the thread engine's decode queue does. (Held
        back until the consumer came again, they idled through most of a long step.)"""
        plan, workers = slot.plan, self._pool.count
        n = len(plan)
        per = max(1, -(-n // (workers * CHUNKS_PER_WORKER)))
        job = _Job(slot, 0)
        self._jobs.append(job)
        arena = self._shared.arena_of[slot.number]
        for first in range(0, n, per):
            stop = min(n, first + per)
            ticket = next(self._tickets)
            self._pending[ticket] = job
            job.left += 1
            k = min(range(workers), key=self._queued.__getitem__)
            self._queued[k] += 1
            self._watchdog.sent(ticket, k)
            self._pool.send(k, ("fill", Chunk(ticket, self.generation, arena, first, plan.epoch,
                                              plan.indices[first:stop], plan.boxes[first:stop],
                                              plan.flips[first:stop], self._epoch.spec)))

    def next_filled(self, block: bool = True) -> Slot | None:
        """The oldest submitted Slot once the workers have written it; None when nothing is
        submitted (or, with block=False, when it is not ready yet). Raises in order."""
        self._watchdog.start()
        while True:
            if not self._jobs:
                return None
            head = self._jobs[0]
            if head.error is not None:
                raise head.error
            if head.left == 0:
                self._jobs.popleft()
                return head.slot
            answers = self._watchdog.results(lambda ticket: self._pending.get(ticket) is head, block)
            if not answers and not block:
                return None
            for k, done in answers:
                self._queued[k] -= 1
                self._hear(done)

    def _hear(self, done: ChunkDone) -> None:
        job = self._pending.pop(done.ticket)
        job.left -= 1
        self._stats.add(read_s=done.read_s, decode_s=done.decode_s)
        plan, slot = job.slot.plan, job.slot
        try:
            for j, error, sub in done.substitutes:
                self._policy.replace(plan, j, error, self._accept(slot, j, sub))
            if done.error is not None:
                j, error, bad_record = done.error
                if not bad_record:
                    raise error
                self._policy.replace(plan, j, error, self._accept(slot, j, None))   # raises
        except Exception as exc:   # heard in order, when its batch is due
            if job.error is None:
                job.error = exc

    def _accept(self, slot: Slot, j: int, sub: int | None):
        """The policy's attempt: the worker's own substitute is the one delivered."""
        def attempt(other: int, box, flip: bool) -> int:
            if other != sub:
                raise LookupError("not the worker's substitute")
            slot.substitute(j, other, self._store.label(other))
            substitute_targets(self._shared.targets, slot, j, other, box, flip)
            return other
        return attempt

    def drain(self) -> None:
        """Wait until every worker has answered what it was sent (the workers skip what is
        left of an abandoned run). A sync token per worker marks the end: the queue's own
        count of chunks in flight may be wrong here, when an exception (Ctrl-C) cut into it.
        The loader's ``timeout`` bounds it too: a worker stuck on its sample is stopped."""
        self._pool.new_generation()
        self._pool.sync(min(DRAIN_S, self._watchdog.timeout_s or DRAIN_S))


class ProcessBatches:
    """A BatchSource of ``config.num_threads`` worker processes writing into shared Slots.
    The workers start with the engine and live until ``close()``; one ``run`` at a time."""

    def __init__(self, store, config: LoaderConfig, decoder: Decoder, parts: EngineParts):
        self.store, self.config, self.decoder = store, config, decoder
        self.transforming, self.targets = parts.transforming, parts.targets
        self.bad_records, self.finisher = parts.bad_records, parts.finisher
        t = parts.transforming
        setup = WorkerSetup(store, decoder, t.host if t is not None and t.per_sample else None, config.seed,
                            self.bad_records.on_error.value == "substitute", os.getpid())
        self.pool = WorkerPool(setup, config.num_threads, config.decoder)
        self._closer = weakref.finalize(self, self.pool.close)
        self.pinning = HostPinning(config.output.device) if config.output.on_cuda else None
        self.shared = SharedRing(self.pool, config, self.targets, config.augment.size, self.pinning)
        self._pool_lost = False

    @staticmethod
    def buffer_bytes(config: LoaderConfig) -> tuple[int, int]:
        """(host, device) bytes: the ring's shared Slots; on a CUDA device the Finisher's batches."""
        h, w = config.augment.size
        pixels = config.batch_size * h * w * 3
        itemsize = 1 if not writes_normalized(config.output) else config.output.dtype.itemsize
        return ring_slots(config.prefetch) * pixels * itemsize, device_batches_bytes(config.prefetch, pixels,
                                                                                      config.output)

    def run(self, epoch: EpochPlan, start: int, stats: LoaderStats) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        store = self.store
        if self._pool_lost:
            self._renew()
        if self.shared.ring.size != tuple(epoch.spec.size):   # a size schedule moved: a new ring
            self.shared.drop()
            self.shared = SharedRing(self.pool, self.config, self.targets, epoch.spec.size, self.pinning)
        samples = epoch.samples(len(store))
        plans = epoch.batches(store.labels, store.sizes, start, samples=samples)
        policy = self.bad_records.policy(epoch, stats.ledger)
        with read_ahead(store, epoch, start, samples) as ahead:
            queue = WorkerQueue(self.pool, self.shared, epoch, policy, stats, store, self.config.timeout)
            feed = Feed(queue, ahead.follow(plans), self.shared.ring, targets=self.targets)   # workers draw
            whole = False
            try:
                yield from deliver(feed, self.finisher, stats)
                whole = True
            except GeneratorExit:   # closed at a yield (a break, an abandoned iterator): between two steps
                whole = True
                raise
            finally:
                if self.pool.running:
                    self._finish(queue, whole)

    def _finish(self, queue: WorkerQueue, whole: bool) -> None:
        """The workers made ready for the next run. An exception that cut into the feed's
        steps (a Ctrl-C anywhere, an error) may have left a message half sent or an arena
        half given: those workers are stopped, as are workers the drain cannot settle (a
        second Ctrl-C, one stuck past DRAIN_S), and the next run starts new ones."""
        ready = False
        try:
            if whole:
                queue.drain()
                ready = True
        finally:
            if not ready:
                self._pool_lost = True   # first: a Ctrl-C inside close() must still have the next run renew
                self.pool.close(kill=True)

    def _renew(self) -> None:
        """New workers and a new ring, in place of those a failed drain stopped."""
        self.pool.close(kill=True)   # finishes a close a Ctrl-C cut short
        self.pool = WorkerPool(self.pool.setup, self.config.num_threads, self.config.decoder)
        self._closer.detach()
        self._closer = weakref.finalize(self, self.pool.close)
        self.shared = SharedRing(self.pool, self.config, self.targets, self.shared.ring.size, self.pinning)
        self._pool_lost = False

    @property
    def ring(self) -> Ring:
        """The ring of shared Slots, as the thread engine's ``ring``."""
        return self.shared.ring

    def close(self) -> None:
        """Stop and join the workers; the shared memory goes with the last tensor over it."""
        self._closer()

    def __repr__(self) -> str:
        return f"ProcessBatches({self.decoder!r}, workers={self.config.num_threads})"
