"""The workers of the CPU engine, and their lifecycle in one place.

A worker runs the one sample path (fill.py) in the one worker loop (worker_loop.py): a
thread of this process (thread_workers.py, ``num_workers=0``) or a process with its own
GIL (process_workers.py, the default). The consumer speaks to both alike: it gives them
the Slots' arenas, starts a run (``begin``), sends chunks of plans (``send``: to the worker
with the fewest chunks waiting), hears their answers (``results``) and ends the run
(``end_run``). Only how a message travels differs.

Lifecycle: the workers start with the first run and live across runs (epochs) until
``close()``. A run that ends whole is drained (every worker answers a sync token); one cut
short by an exception (a Ctrl-C can cut into any step: a message half sent) stops them,
and the next run starts new ones, which are given every live arena. ``close()`` acts only
in the process that started the workers: a finalizer or at-exit hook copied into a forked
child does nothing there.
"""
from __future__ import annotations

import itertools
import os
import time
import numpy as np

from .arena import Arena
from .fill import IDLE, Chunk, RunSpec, SampleSpec, Synced
from .rows import RowFormat
from .shutdown import close_at_exit

DRAIN_S = 30.0          # an abandoned run's workers each finish the sample they are on within this


class Workers:
    """``count`` workers serving ``spec``. Not thread-safe: one consumer drives them.
    Subclasses say how workers start and stop and how a message travels: ``_start()``,
    ``_post(k, message)``, ``_post_arena(k, number, format, arena)``, ``_receive(timeout)``
    -> [(k, answer)], ``_stop(kill)``; and for messages, ``name(k)`` ("worker process 3
    (pid 1234)", "worker thread 1") and ``stack(k)`` (worker k's Python stack, as text)."""

    kind = "worker"
    shares_memory = True   # whether a Slot's arena must be memory other processes can map

    def __init__(self, spec: SampleSpec, count: int):
        self.spec, self.count = spec, count
        self.owner = os.getpid()
        self.running = False          # started, and neither stopped nor dead
        self.closed = False
        self.error: BaseException | None = None   # a worker's death: the loader cannot go on
        self.ended = True             # the last run went through end_run
        self._arenas: dict[int, tuple[RowFormat, Arena]] = {}
        self._queued = [0] * count    # chunks sent to each worker, not answered yet
        self._tokens = itertools.count()
        self.control = self._control()
        self.control[0], self.control[1:] = 0, IDLE
        close_at_exit(self)

    def _control(self) -> np.ndarray:
        """int64 [1 + count]: the generation, and the record each worker holds (fill.Control)."""
        return np.zeros(1 + self.count, dtype=np.int64)

    # -- the consumer's side ------------------------------------------------------------
    def holding(self, k: int) -> str:
        """The record worker ``k`` is on, as the shared control array says."""
        return holding(self.spec.store, int(self.control[1 + k]))

    def start(self) -> None:
        """Start the workers unless they run, and give them every live arena."""
        if self.error is not None:
            raise self.error
        if self.closed:
            raise RuntimeError("the loader's workers were stopped: the loader was closed")
        if self.running:
            return
        self._stop(kill=True)          # finishes a stop that a Ctrl-C cut short
        self._queued = [0] * self.count
        self._start()
        for number, (fmt, arena) in self._arenas.items():
            for k in range(self.count):
                self._post_arena(k, number, fmt, arena)
        self.running = True            # last: workers cut short before they had every arena are stopped

    def give_arena(self, number: int, fmt: RowFormat, arena: Arena) -> None:
        """Every worker maps ``arena`` as arena ``number`` (now, and when started anew)."""
        self._arenas[number] = (fmt, arena)
        if self.running:
            for k in range(self.count):
                self._post_arena(k, number, fmt, arena)

    def arena_numbers(self) -> set[int]:
        """The arenas the workers map (and are given when started anew), by number."""
        return set(self._arenas)

    def drop_arena(self, number: int) -> None:
        """The workers forget arena ``number``; its memory goes with the last tensor over it."""
        _, arena = self._arenas.pop(number)
        arena.close_fd()
        if self.running:
            for k in range(self.count):
                self._post(k, ("drop", number))

    def begin(self, epoch: int, augment) -> RunSpec:
        """A new run: chunks of the runs before it are skipped by the workers. If the last run
        never reached the end of ``end_run`` (a Ctrl-C just before it), a worker may still be
        writing a sample of it into a Slot this run refills: those workers are started anew."""
        if self.ended is False:
            self.running = False
        self.start()
        self.ended = False
        self.control[0] += 1
        run = RunSpec(int(self.control[0]), epoch, augment)
        for k in range(self.count):
            self._post(k, ("run", run))
        return run

    def send(self, chunk: Chunk) -> int:
        """``chunk`` to the worker with the fewest chunks waiting; that worker's number."""
        k = min(range(self.count), key=self._queued.__getitem__)
        self._queued[k] += 1
        self._post(k, ("fill", chunk))
        return k

    def results(self, timeout: float | None) -> list[tuple[int, object]]:
        """The answers that arrived within ``timeout`` (None: wait for at least one); a
        WorkerError when a worker died."""
        answers = self._receive(timeout)
        for k, answer in answers:
            if not isinstance(answer, Synced):
                self._queued[k] -= 1
        return answers

    def sync(self, timeout_s: float) -> None:
        """Return once every worker has handled every message sent before this call (their
        answers are dropped); a TimeoutError when one has not within ``timeout_s``."""
        token = next(self._tokens)
        for k in range(self.count):
            self._post(k, ("sync", token))
        waiting, deadline = set(range(self.count)), time.monotonic() + timeout_s
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"feedline {self.kind}s {sorted(waiting)} did not finish their sample within "
                                   f"{timeout_s:g} s of the run's end: they are stopped")
            for k, answer in self.results(left):
                if isinstance(answer, Synced) and answer.token == token:
                    waiting.discard(k)

    def end_run(self, whole: bool, timeout_s: float = 0.0) -> None:
        """Make the workers ready for the next run. A run cut short by an exception may have
        left a message half sent: its workers are stopped, as are workers the drain cannot
        settle (a second Ctrl-C, one stuck past DRAIN_S or ``timeout_s``); the next run
        starts new ones."""
        if not self.running:
            self.ended = True
            return
        ready = False
        try:
            if whole:
                self.control[0] += 1   # what is left of the run is skipped
                self.sync(min(DRAIN_S, timeout_s or DRAIN_S))
                ready = True
        finally:
            if not ready:
                self.running = False   # first: a Ctrl-C inside the stop must still have the next run start anew
                self._stop(kill=True)
            self.ended = True

    def died(self, error: BaseException) -> None:
        """A worker is gone (``error`` says how): the others are stopped, and this run and every
        later one end with ``error``."""
        self.error, self.running = error, False
        self._stop(kill=True)
        raise error

    def close(self) -> None:
        """Stop the workers and join them; a close cut short (Ctrl-C) is finished by the next.
        Only in the process that made them: in a forked child this is a copy, and does nothing."""
        if os.getpid() != self.owner:
            return
        self.closed, self.running = True, False
        self._stop(kill=False)
        while self._arenas:
            self._arenas.popitem()[1][1].close_fd()


def holding(store, record: int) -> str:
    """Where a worker holding ``record`` is (IDLE: between records)."""
    if record == IDLE:
        return "between records"
    if isinstance(store, str):   # a spawned worker's store, by name
        return f"while it held record {record} of {store}"
    return f"while it held record {record} ({store.path(record)}) of {store.filename}"
