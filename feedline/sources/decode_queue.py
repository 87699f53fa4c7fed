"""Decode threads that fill the slots of a batch ring, batch after batch, in order.

Concurrency invariant: one Condition guards the plan iterator, the free-slot list,
the queue of assigned batches and their counters. A worker claims a few samples of the
oldest unfinished batch under the lock, decodes them with the lock released straight
into that batch's slot, then reports under the lock. A slot is written only by the
workers while its batch is being filled and read only by the consumer between
``next_filled`` and ``release``. No sleeping polls: everyone waits on the Condition.
"""
from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass
from typing import Iterator

from ..choices import OnError
from ..decoders.base import Box, Decoder
from ..plan import BatchPlan, EpochPlan
from ..stats import LoaderStats
from .records import bad_record, read_record, record_error
from .ring import BatchRing
from .shutdown import close_at_exit
from .substitute import MAX_ATTEMPTS, substitute_sample


_CLAIM = 2          # samples a worker takes at once: fewer lock round trips, still balanced


@dataclass
class _Batch:
    plan: BatchPlan | None     # None: planning the batch failed (``error`` says why)
    slot: int
    claimed: int = 0
    done: int = 0
    error: BaseException | None = None
    output: object = None  # the finished batch tensor, when samples are converted here


class DecodeQueue:
    """Owns its threads: started in ``__init__``, stopped and joined by ``close()``."""

    def __init__(self, store, decoder: Decoder, ring: BatchRing, plans: Iterator[BatchPlan],
                 epoch_plan: EpochPlan, num_threads: int, on_error: OnError, stats: LoaderStats,
                 converter=None):
        """``converter``, when given, turns each decoded sample into its final form in the
        decode thread: ``new_batch(n)`` makes a batch's output, ``convert_sample(sample,
        output, j)`` fills row j (see CpuFinisher)."""
        self._store, self._decoder, self._ring = store, decoder, ring
        self._plans = iter(plans)
        self._epoch_plan = epoch_plan
        self._on_error = on_error
        self._stats = stats
        self._converter = converter
        self._cond = threading.Condition()
        self._free = collections.deque(range(ring.slots))
        self._assigned: collections.deque[_Batch] = collections.deque()
        self._plans_done = False
        self._closed = False
        self._threads = [threading.Thread(target=self._work, name=f"feedline-decode-{i}", daemon=True)
                         for i in range(num_threads)]
        for t in self._threads:
            t.start()
        close_at_exit(self)

    # -- consumer side -------------------------------------------------------------
    def next_filled(self, block: bool = True) -> _Batch | None:
        """The oldest batch once all its samples are decoded; None at the end of the
        plans (or, with block=False, when it is not ready yet). Raises a worker's error."""
        with self._cond:
            while True:
                if self._assigned and self._assigned[0].error is not None:
                    raise self._assigned[0].error
                if self._assigned and self._assigned[0].done == len(self._assigned[0].plan):
                    return self._assigned.popleft()
                if (self._plans_done and not self._assigned) or self._closed:
                    return None
                if not block:
                    return None
                self._cond.wait()

    def release(self, slot: int) -> None:
        """The consumer is done with ``slot``; workers may refill it."""
        with self._cond:
            self._free.append(slot)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join()

    # -- worker side ---------------------------------------------------------------
    def _claim(self):
        """Under the lock: (batch, first, stop) of samples to decode, or None to exit."""
        while not self._closed:
            for batch in self._assigned:
                if batch.error is None and batch.claimed < len(batch.plan):
                    first = batch.claimed
                    batch.claimed = min(first + _CLAIM, len(batch.plan))
                    return batch, first, batch.claimed
            if self._free and not self._plans_done:
                try:
                    plan = next(self._plans)
                    output = self._converter.new_batch(len(plan)) if self._converter else None
                except StopIteration:
                    self._plans_done = True
                    self._cond.notify_all()
                    continue
                except BaseException as exc:  # planning or allocating a batch failed: the consumer hears it in order
                    self._plans_done = True
                    self._assigned.append(_Batch(None, -1, error=exc))
                    self._cond.notify_all()
                    continue
                slot = self._free.popleft()
                self._ring.labels_np[slot, :len(plan)] = plan.labels
                self._assigned.append(_Batch(plan, slot, output=output))
                continue
            self._cond.wait()
        return None

    def _work(self) -> None:
        times = [0.0, 0.0, 0.0]  # read, decode, convert: summed here, reported per claim
        while True:
            with self._cond:
                if any(times):
                    self._stats.add(read_s=times[0], decode_s=times[1], copy_s=times[2])
                    times = [0.0, 0.0, 0.0]
                claim = self._claim()
            if claim is None:
                return
            batch, first, stop = claim
            error = None
            for j in range(first, stop):
                try:
                    for k, spent in enumerate(self._fill(batch, j)):
                        times[k] += spent
                except BaseException as exc:  # reaches the consumer, with index and path
                    error = exc
                    break
            with self._cond:
                if error is not None and batch.error is None:
                    batch.error = error
                batch.done += stop - first
                if batch.error is not None or batch.done == len(batch.plan):
                    self._cond.notify_all()

    def _fill(self, batch: _Batch, j: int) -> tuple[float, float, float]:
        plan = batch.plan
        index = int(plan.indices[j])
        out = self._ring.images_np[batch.slot, j]
        t0 = time.perf_counter()
        try:
            data = read_record(self._store, index)
            t1 = time.perf_counter()
            self._decoder.decode_into(data, Box(*plan.boxes[j]), bool(plan.flips[j]), out)
        except Exception as exc:
            if self._on_error is OnError.RAISE:
                self._stats.ledger.add(bad_record(self._store, plan, j, exc, None))
                raise record_error(self._store, index, exc) from exc
            self._substitute(batch, j, exc)
            t1 = t0
        t2 = time.perf_counter()
        if self._converter is not None:
            self._converter.convert_sample(out, batch.output, j)
        return t1 - t0, t2 - t1, time.perf_counter() - t2

    def _substitute(self, batch: _Batch, j: int, error: Exception) -> None:
        """Fill slot j with another record chosen by a pure function of (seed, epoch, index),
        the same rule as every source, with the crop and flip it has as an ordinary sample."""
        ep, store, plan = self._epoch_plan, self._store, batch.plan
        index = int(plan.indices[j])
        for attempt in range(MAX_ATTEMPTS):
            other, box, flip = substitute_sample(ep.spec, ep.seed, ep.epoch, index, attempt, store.sizes)
            try:
                self._decoder.decode_into(read_record(store, other), Box(*box), flip,
                                          self._ring.images_np[batch.slot, j])
            except Exception:
                continue
            self._ring.labels_np[batch.slot, j] = store.label(other)
            self._stats.ledger.add(bad_record(store, plan, j, error, other))
            return
        self._stats.ledger.add(bad_record(store, plan, j, error, None))
        raise record_error(store, index, error)
