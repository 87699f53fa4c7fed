"""DataLoader's ``timeout`` for the worker engine: the consumer waits for the due batch at
most ``timeout`` seconds without an answer from the workers holding it, then raises a
WorkerError naming each of them, its pid and the record it holds.

The clock starts when the consumer asks for the batch and restarts with each answer for
it: a batch of many chunks may take longer than ``timeout`` in all, one stuck record may
not. Answers for later batches do not count: a worker stuck on the due batch is found even
while the others run ahead. The raise ends the run, and the run's end stops the workers
(processes.py); the next iteration starts new ones.
"""
from __future__ import annotations

import time
from typing import Callable

from .worker_pool import WorkerError, WorkerPool, holding
from .worker_process import ChunkDone


class Watchdog:
    """Which worker was sent each chunk, and how long the due batch has gone unanswered.
    ``timeout_s`` 0 waits forever, as DataLoader's 0 does."""

    def __init__(self, pool: WorkerPool, timeout_s: float):
        self.pool, self.timeout_s = pool, timeout_s
        self._holder: dict[int, int] = {}    # ticket -> the worker it was sent to, until answered
        self._since = time.monotonic()

    def sent(self, ticket: int, worker: int) -> None:
        self._holder[ticket] = worker

    def start(self) -> None:
        """The consumer begins waiting for a batch."""
        self._since = time.monotonic()

    def results(self, due: Callable[[int], bool], block: bool) -> list[tuple[int, ChunkDone]]:
        """The pool's answers (``block``: at least one); a WorkerError when no answer for the
        due batch (the tickets ``due`` says yes to) came within ``timeout_s``."""
        if not block:
            return self._heard(self.pool.results(0), due)
        while True:
            left = None if not self.timeout_s else self._since + self.timeout_s - time.monotonic()
            answers = self.pool.results(None if left is None else max(0.0, left))
            if answers:
                return self._heard(answers, due)
            if left is not None and time.monotonic() >= self._since + self.timeout_s:
                stuck = sorted({k for t, k in self._holder.items() if due(t)}) or list(range(self.pool.count))
                raise stuck_error(self.pool, stuck, self.timeout_s)

    def _heard(self, answers: list, due: Callable[[int], bool]) -> list:
        for _, done in answers:
            if self._holder.pop(done.ticket, None) is not None and due(done.ticket):
                self._since = time.monotonic()
        return answers


def stuck_error(pool: WorkerPool, workers: list[int], timeout_s: float) -> WorkerError:
    """``workers`` sent no answer within ``timeout_s``: each of them, its pid and its record.
    Raised, it ends the run, whose end stops the workers."""
    stuck = "; ".join(f"worker {k} (pid {pool.procs[k].pid}) sent no answer within timeout={timeout_s:g} s "
                      f"{holding(pool, k)}" for k in workers)
    return WorkerError(f"feedline {stuck}. The workers are stopped; the next iteration starts new ones "
                       "(raise timeout= if a record can take that long)")
