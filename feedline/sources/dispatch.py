"""The consumer's side of a run of the CPU engine: each planned Slot's rows go to the
workers as chunks, and the filled Slots come back in order, with the facts of what the
workers did recorded: a substitute goes into the ledger and the Slot's labels and targets;
a failure is raised when its batch is due, after the batches before it.

The Feed (feed.py) plans the Slots and drives a ChunkQueue; the workers (workers.py) fill
them, threads or processes alike.
"""
from __future__ import annotations

import collections
import itertools
from dataclasses import dataclass

from ..planning.plan import EpochPlan
from ..core.stats import LoaderStats
from .fill import Chunk, ChunkDone, Failure
from .policy import BadRecordPolicy
from .slot import Slot
from .target_batches import TargetSpec, substitute_targets
from .watchdog import Watchdog
from .workers import Workers

CHUNKS_PER_WORKER = 4   # a batch is cut into about this many chunks per worker: balance, few messages


@dataclass
class _Job:
    slot: Slot | None    # None: a batch that could not be made (``fail``)
    left: int
    error: BaseException | None = None


class ChunkQueue:
    """Chunks of each submitted Slot to the workers, filled Slots back in order."""

    def __init__(self, workers: Workers, epoch: EpochPlan, policy: BadRecordPolicy, stats: LoaderStats,
                 targets: TargetSpec | None, timeout_s: float = 0.0):
        self._workers = workers
        self._policy, self._stats, self._targets = policy, stats, targets
        self._jobs: collections.deque[_Job] = collections.deque()
        self._pending: dict[int, _Job] = {}
        self._tickets, self._watchdog = itertools.count(), Watchdog(workers, timeout_s)
        self.run = workers.begin(epoch.epoch, epoch.spec)

    def fail(self, error: BaseException) -> None:
        """The next batch cannot be made: the consumer gets ``error`` after the batches before it."""
        self._jobs.append(_Job(None, 0, error))

    def submit(self, slot: Slot) -> None:
        """The batch's chunks, each sent at once: the workers go on filling every planned
        Slot of the ring while the consumer is away (a training step, a batch transform)."""
        plan = slot.plan
        n = len(plan)
        per = max(1, -(-n // (self._workers.count * CHUNKS_PER_WORKER)))
        job = _Job(slot, 0)
        self._jobs.append(job)
        for first in range(0, n, per):
            stop = min(n, first + per)
            ticket = next(self._tickets)
            self._pending[ticket] = job
            job.left += 1
            k = self._workers.send(Chunk(ticket, self.run.generation, slot.arena, first, plan.indices[first:stop],
                                         plan.boxes[first:stop], plan.flips[first:stop]))
            self._watchdog.sent(ticket, k)

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
                if isinstance(done, ChunkDone):
                    self._hear(k, done)

    def _hear(self, k: int, done: ChunkDone) -> None:
        job = self._pending.pop(done.ticket, None)
        if job is None:   # a chunk of an abandoned run
            return
        job.left -= 1
        self._stats.add(read_s=done.read_s, decode_s=done.decode_s, copy_s=done.write_s)
        if job.error is not None:   # the batch failed already: the rest of it is nobody's
            return
        slot = job.slot
        try:
            for s in done.substituted:   # the worker's facts, recorded as they are
                self._policy.substituted(slot.plan, s.row, s.error, s.index)
                slot.substitute(s.row, s.index, self._policy.store.label(s.index))
                substitute_targets(self._targets, slot, s.row, s.index, s.box, s.flip)
            if done.failure is not None:
                self._raise(k, slot, done.failure)
        except Exception as exc:   # heard in order, when its batch is due
            job.error = exc

    def _raise(self, k: int, slot: Slot, failure: Failure):
        if failure.bad_record:
            self._policy.fail(slot.plan, failure.row, failure.error)   # raises, naming the record
        index = int(slot.plan.indices[failure.row])
        if hasattr(failure.error, "add_note"):
            failure.error.add_note(f"in feedline {self._workers.name(k)}, on record {index} "
                                   f"({self._policy.store.path(index)})")
        raise failure.error

    @property
    def timeout_s(self) -> float:
        return self._watchdog.timeout_s
