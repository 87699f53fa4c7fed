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

import numpy as np
import torch

from ..config import LoaderConfig, OutputSpec
from ..decoders.base import Decoder
from ..plan import EpochPlan
from ..stats import LoaderStats
from .cuda_finisher import device_batches_bytes
from .normalization import normalize_table
from .parts import EngineParts
from .policy import BadRecordPolicy
from .readahead import read_ahead
from .ring import Ring, ring_slots
from .shared_rows import Arena, RowFormat
from .slot import Slot
from .target_batches import TargetSpec, plan_targets, substitute_targets
from .threads import deliver
from .watchdog import Watchdog
from .worker_pool import WorkerPool
from .worker_process import Chunk, ChunkDone, WorkerSetup

CHUNKS_PER_WORKER = 4   # a batch is cut into about this many chunks per worker: balance, few messages
QUEUED = 2              # chunks waiting at a worker: it never idles between two
DRAIN_S = 30.0          # an abandoned run's workers each finish the sample they are on within this

# Output dtypes a worker writes normalized (numpy has them); others get uint8 pixels,
# normalized per batch by the Finisher.
_NUMPY_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.uint8: "uint8"}


def writes_normalized(output: OutputSpec) -> bool:
    """Whether the workers write the batch the host consumer receives (else uint8 pixels)."""
    return not output.on_cuda and output.dtype in _NUMPY_DTYPES


def row_format(config: LoaderConfig, size: tuple[int, int]) -> RowFormat:
    output = config.output
    if not writes_normalized(output):
        return RowFormat(config.batch_size, tuple(size))
    table = normalize_table(output.mean, output.std) if output.mean is not None else None
    return RowFormat(config.batch_size, tuple(size), _NUMPY_DTYPES[output.dtype], output.channels_last, table)


class SharedRing:
    """The ring's Slots, each in an arena of its own that every worker maps. A Slot made
    anew (its old tensors still held by the consumer, or a new size) gets a new arena; the
    workers forget the old one, whose memory goes when the consumer lets go of it."""

    def __init__(self, pool: WorkerPool, config: LoaderConfig, targets: TargetSpec | None, size):
        self.pool, self.config, self.targets = pool, config, targets
        self.format = row_format(config, size)
        self.arena_of: dict[int, int] = {}       # ring position -> arena number
        self._numbers = itertools.count()
        on_cuda = config.output.on_cuda
        self.ring = Ring(ring_slots(config.prefetch), size, self._make, reuse_held=on_cuda)

    def _make(self, number: int) -> Slot:
        fmt = self.format
        arena = Arena(fmt.nbytes)
        old, self.arena_of[number] = self.arena_of.get(number), next(self._numbers)
        self.pool.give_arena(self.arena_of[number], fmt, arena)
        if old is not None:
            self.pool.drop_arena(old)
        flat = torch.frombuffer(arena.memory, dtype=getattr(torch, fmt.dtype), count=int(np.prod(fmt.shape)))
        images = flat.view(fmt.shape)
        if not self.config.output.on_cuda and fmt.channels_last:
            images = images.permute(0, 3, 1, 2)   # N x C x H x W in channels_last memory
        labels = torch.empty(self.config.batch_size, dtype=torch.int64)
        return Slot(number, images, labels, self.targets.allocate(False) if self.targets else None, fmt.size)

    def drop(self) -> None:
        for arena in self.arena_of.values():
            self.pool.drop_arena(arena)
        self.arena_of.clear()


@dataclass
class _Job:
    slot: Slot
    left: int
    error: BaseException | None = None


class ProcessFeed:
    """The consumer's side: plans each free Slot, sends its chunks to the workers, and gives
    the filled Slots back in order. Same surface as feed.Feed (``next_filled``, ``release``)."""

    def __init__(self, pool: WorkerPool, plans: Iterator, shared: SharedRing, epoch: EpochPlan,
                 policy: BadRecordPolicy, stats: LoaderStats, store, timeout_s: float = 0.0):
        self._pool, self._plans, self._shared, self._ring = pool, plans, shared, shared.ring
        self._epoch, self._policy, self._stats, self._store = epoch, policy, stats, store
        self._free = collections.deque(range(self._ring.slots))
        self._jobs: collections.deque[_Job] = collections.deque()
        self._pending: dict[int, _Job] = {}
        self._unsent: collections.deque[Chunk] = collections.deque()
        self._queued = [0] * pool.count      # chunks sent to each worker, not answered yet
        self._tickets, self._watchdog, self._ended = itertools.count(), Watchdog(pool, timeout_s), False
        self.generation = pool.new_generation()

    def _top_up(self) -> None:
        while self._free and not self._ended:
            try:
                plan = next(self._plans)
                slot = self._ring.slot(self._free[0])
            except StopIteration:
                self._ended = True
                return
            slot.load(plan)
            plan_targets(self._shared.targets, slot)
            self._free.popleft()
            self._submit(slot)

    def _submit(self, slot: Slot) -> None:
        """The batch's chunks queue up; each goes to the first worker with room (``_dispatch``)."""
        plan, workers = slot.plan, self._pool.count
        n = len(plan)
        per = max(1, -(-n // (workers * CHUNKS_PER_WORKER)))
        job = _Job(slot, 0)
        arena = self._shared.arena_of[slot.number]
        for first in range(0, n, per):
            stop = min(n, first + per)
            ticket = next(self._tickets)
            self._unsent.append(Chunk(ticket, self.generation, arena, first, plan.epoch, plan.indices[first:stop],
                                      plan.boxes[first:stop], plan.flips[first:stop], self._epoch.spec))
            self._pending[ticket] = job
            job.left += 1
        self._jobs.append(job)
        self._dispatch()

    def _dispatch(self) -> None:
        """Chunks to the workers, oldest first, at most QUEUED waiting at each: a worker that
        finishes early takes more, so a slow image (a big crop, a costly transform) delays
        its batch, not the others' work."""
        while self._unsent:
            k = min(range(self._pool.count), key=self._queued.__getitem__)
            if self._queued[k] >= QUEUED:
                return
            self._queued[k] += 1
            self._watchdog.sent(self._unsent[0].ticket, k)
            self._pool.send(k, ("fill", self._unsent.popleft()))

    def next_filled(self, block: bool = True) -> Slot | None:
        self._top_up()
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
            self._dispatch()

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

    def release(self, slot: Slot) -> None:
        self._free.append(slot.number)

    def drain(self) -> None:
        """Wait until every worker has answered what it was sent (the workers skip what is
        left of an abandoned run). A sync token per worker marks the end: the feed's own
        count of chunks in flight may be wrong here, when an exception (Ctrl-C) cut into it.
        The loader's ``timeout`` bounds it too: a worker stuck on its sample is stopped."""
        self._pool.new_generation()
        self._unsent.clear()
        self._pool.sync(min(DRAIN_S, self._watchdog.timeout_s or DRAIN_S))


class ProcessBatches:
    """A BatchSource of ``config.num_threads`` worker processes writing into shared Slots.
    The workers start with the engine and live until ``close()``; one ``run`` at a time."""

    def __init__(self, store, config: LoaderConfig, decoder: Decoder, parts: EngineParts):
        self.store, self.config, self.decoder = store, config, decoder
        self.targets, self.bad_records, self.finisher = parts.targets, parts.bad_records, parts.finisher
        t = parts.transforming
        setup = WorkerSetup(store, decoder, t.host if t is not None and t.per_sample else None, config.seed,
                            self.bad_records.on_error.value == "substitute", os.getpid())
        self.pool = WorkerPool(setup, config.num_threads, config.decoder)
        self._closer = weakref.finalize(self, self.pool.close)
        self.shared = SharedRing(self.pool, config, self.targets, config.augment.size)
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
            self.shared = SharedRing(self.pool, self.config, self.targets, epoch.spec.size)
        samples = epoch.samples(len(store))
        plans = epoch.batches(store.labels, store.sizes, start, samples=samples)
        policy = self.bad_records.policy(epoch, stats.ledger)
        with read_ahead(store, epoch, start, samples) as ahead:
            feed = ProcessFeed(self.pool, ahead.follow(plans), self.shared, epoch, policy, stats, store,
                               self.config.timeout)
            whole = False
            try:
                yield from deliver(feed, self.finisher, stats)
                whole = True
            except GeneratorExit:   # closed at a yield (a break, an abandoned iterator): between two steps
                whole = True
                raise
            finally:
                if self.pool.running:
                    self._finish(feed, whole)

    def _finish(self, feed: ProcessFeed, whole: bool) -> None:
        """The workers made ready for the next run. An exception that cut into the feed's
        steps (a Ctrl-C anywhere, an error) may have left a message half sent or an arena
        half given: those workers are stopped, as are workers the drain cannot settle (a
        second Ctrl-C, one stuck past DRAIN_S), and the next run starts new ones."""
        ready = False
        try:
            if whole:
                feed.drain()
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
        self.shared = SharedRing(self.pool, self.config, self.targets, self.shared.ring.size)
        self._pool_lost = False

    def close(self) -> None:
        """Stop and join the workers; the shared memory goes with the last tensor over it."""
        self._closer()

    def __repr__(self) -> str:
        return f"ProcessBatches({self.decoder!r}, workers={self.config.num_threads})"
