"""Decode threads that fill the batches submitted to them, oldest first.

Concurrency invariant: one Condition guards the deque of submitted jobs and their counters.
A worker claims a few samples of the oldest job with samples left under the lock, reads,
decodes and writes them with the lock released straight into the job's Slot, then
reports under the lock. A Slot is written only by the workers while its job is
unfinished, and read by the consumer only after ``next_filled`` returned it. Slots
arrive planned (see feed.py): no planning, allocating or waiting on anything but the
Condition happens here. No sleeping polls: everyone waits on the Condition.

Where sample j is decoded and how it is written into its Slot is the ``rows``' business
(rows.py: host output rows or uint8 staging rows).
"""
from __future__ import annotations

import collections
import functools
import threading
import time
from dataclasses import dataclass

import numpy as np

from ..decoders.base import Box, Decoder
from ..stats import LoaderStats
from .policy import BadRecordPolicy
from .shutdown import close_at_exit
from .slot import Slot
from .target_batches import TargetSpec, substitute_targets

CLAIM = 2          # samples a worker takes at once: fewer lock round trips, still balanced


@dataclass
class Job:
    slot: Slot | None          # None: the batch could not be planned (``error`` says why)
    size: int = 0              # samples of the batch
    claimed: int = 0
    done: int = 0
    error: BaseException | None = None


class DecodeQueue:
    """Owns its threads: started in ``__init__``, stopped and joined by ``close()``."""

    def __init__(self, store, decoder: Decoder, policy: BadRecordPolicy, num_threads: int,
                 stats: LoaderStats, rows, targets: TargetSpec | None = None):
        self._store, self._decoder, self._policy, self._stats = store, decoder, policy, stats
        self._rows, self._targets = rows, targets   # rows.py: where a sample goes; the targets beyond the label
        self._cond = threading.Condition()
        self._jobs: collections.deque[Job] = collections.deque()
        self._closed = False
        self._threads = [threading.Thread(target=self._work, name=f"feedline-decode-{i}", daemon=True)
                         for i in range(num_threads)]
        for t in self._threads:
            t.start()
        close_at_exit(self)

    # -- consumer side -------------------------------------------------------------
    def submit(self, slot: Slot) -> None:
        """Fill ``slot`` with the samples of its plan (its labels are already there)."""
        with self._cond:
            self._jobs.append(Job(slot, len(slot.plan)))
            self._cond.notify_all()

    def fail(self, error: BaseException) -> None:
        """The next batch cannot be made: the consumer gets ``error`` after the batches before it."""
        with self._cond:
            self._jobs.append(Job(None, error=error))
            self._cond.notify_all()

    def next_filled(self, block: bool = True) -> Slot | None:
        """The oldest Slot once all its samples are written; None when nothing is submitted
        (or, with block=False, when it is not ready yet). Raises a worker's error."""
        with self._cond:
            while True:
                if self._jobs and self._jobs[0].error is not None:
                    raise self._jobs[0].error
                if self._jobs and self._jobs[0].done == self._jobs[0].size:
                    return self._jobs.popleft().slot
                if not self._jobs or self._closed or not block:
                    return None
                self._cond.wait()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join()

    def __enter__(self) -> "DecodeQueue":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- worker side ---------------------------------------------------------------
    def _claim(self) -> tuple[Job, int, int] | None:
        """Under the lock: (job, first, stop) of samples to decode, or None to exit."""
        while not self._closed:
            for job in self._jobs:
                if job.error is None and job.claimed < job.size:
                    first = job.claimed
                    job.claimed = min(first + CLAIM, job.size)
                    return job, first, job.claimed
            self._cond.wait()
        return None

    def _work(self) -> None:
        times = [0.0, 0.0, 0.0]  # read, decode, write: summed here, reported per claim
        while True:
            with self._cond:
                if any(times):
                    self._stats.add(read_s=times[0], decode_s=times[1], copy_s=times[2])
                    times = [0.0, 0.0, 0.0]
                claim = self._claim()
            if claim is None:
                return
            job, first, stop = claim
            error = None
            for j in range(first, stop):
                try:
                    for k, spent in enumerate(self._fill(job, j)):
                        times[k] += spent
                except BaseException as exc:  # reaches the consumer, with index and path
                    error = exc
                    break
            with self._cond:
                if error is not None and job.error is None:
                    job.error = error
                job.done += stop - first
                if job.error is not None or job.done == job.size:
                    self._cond.notify_all()

    def _fill(self, job: Job, j: int) -> tuple[float, float, float]:
        slot = job.slot
        plan = slot.plan
        out = self._rows.buffer(slot, j)
        t0 = time.perf_counter()
        try:
            data = self._store.read_checked(int(plan.indices[j]))
            t1 = time.perf_counter()
            self._decoder.decode_into(data, Box(*plan.boxes[j]), bool(plan.flips[j]), out)
        except Exception as exc:
            index = self._policy.replace(plan, j, exc, functools.partial(self._decode_other, out, slot, j))
            slot.substitute(j, index, self._store.label(index))
            t1 = t0
        t2 = time.perf_counter()
        self._rows.write(slot, j, out)
        return t1 - t0, t2 - t1, time.perf_counter() - t2

    def _decode_other(self, out: np.ndarray, slot: Slot, j: int, index: int, box: np.ndarray, flip: bool) -> int:
        """Decode record ``index`` with its own crop and flip into ``out`` (a substitute for row
        ``j`` of ``slot``, which gets its targets); the record."""
        self._decoder.decode_into(self._store.read_checked(index), Box(*box), flip, out)
        substitute_targets(self._targets, slot, j, index, box, flip)
        return index
