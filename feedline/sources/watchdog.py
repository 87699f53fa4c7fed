"""How long the consumer waits for the due batch: DataLoader's ``timeout`` for worker
processes, and a stall report for every engine.

The clock starts when the consumer asks for the batch and restarts with each answer for
it: a batch of many chunks may take longer than ``timeout`` in all, one stuck record may
not. Answers for later batches do not count: a worker stuck on the due batch is found even
while the others run ahead.

- ``timeout`` (processes only; 0: forever, as DataLoader's 0): past it, a WorkerError names
  each worker holding the due batch, its pid and record. The raise ends the run, whose end
  stops the workers (workers.py); the next iteration starts new ones.
- a stall (STALL_S without an answer for the due batch, whatever the timeout): logged once
  per stall, naming each of those workers, its record and its Python stack, so a hang is
  never silent.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from ..core.errors import WorkerError
from .fill import ChunkDone
from .workers import Workers

log = logging.getLogger(__name__)
STALL_S = 60.0


class Watchdog:
    """Which worker was sent each chunk, and how long the due batch has gone unanswered."""

    def __init__(self, workers: Workers, timeout_s: float):
        self.workers, self.timeout_s = workers, timeout_s
        self._holder: dict[int, int] = {}    # ticket -> the worker it was sent to, until answered
        self._since = time.monotonic()
        self._reported = False

    def sent(self, ticket: int, worker: int) -> None:
        self._holder[ticket] = worker

    def start(self) -> None:
        """The consumer begins waiting for a batch."""
        self._since, self._reported = time.monotonic(), False

    def results(self, due: Callable[[int], bool], block: bool) -> list:
        """The workers' answers (``block``: at least one); a WorkerError when no answer for
        the due batch (the tickets ``due`` says yes to) came within ``timeout_s``."""
        if not block:
            return self._heard(self.workers.results(0), due)
        while True:
            deadlines = [self._since + self.timeout_s] if self.timeout_s else []
            if not self._reported:
                deadlines.append(self._since + STALL_S)
            left = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            answers = self.workers.results(left)
            if answers:
                return self._heard(answers, due)
            waited = time.monotonic() - self._since
            if self.timeout_s and waited >= self.timeout_s:
                raise stuck_error(self.workers, self._stuck(due), self.timeout_s)
            if not self._reported and waited >= STALL_S:
                self._reported = True
                log.warning("%s", stall_report(self.workers, self._stuck(due), waited))

    def _stuck(self, due: Callable[[int], bool]) -> list[int]:
        return sorted({k for t, k in self._holder.items() if due(t)}) or list(range(self.workers.count))

    def _heard(self, answers: list, due: Callable[[int], bool]) -> list:
        for _, done in answers:
            if isinstance(done, ChunkDone) and self._holder.pop(done.ticket, None) is not None and due(done.ticket):
                self._since, self._reported = time.monotonic(), False
        return answers


def stuck_error(workers: Workers, stuck: list[int], timeout_s: float) -> WorkerError:
    """``stuck`` sent no answer within ``timeout_s``: each of them and its record. Raised, it
    ends the run, whose end stops the workers."""
    text = "; ".join(f"{workers.name(k)} sent no answer within timeout={timeout_s:g} s {workers.holding(k)}"
                     for k in stuck)
    return WorkerError(f"feedline {text}. The workers are stopped; the next iteration starts new ones "
                       "(raise timeout= if a record can take that long)")


def stall_report(workers: Workers, stuck: list[int], waited: float) -> str:
    """What a stall looks like from here: each worker holding the due batch, its record and stack."""
    parts = [f"feedline: no answer for the due batch in {waited:.0f} s (the loader waits on: timeout=0 waits "
             "forever). Its workers:"]
    for k in stuck:
        parts.append(f"{workers.name(k)}, {workers.holding(k)}; its Python stack:\n{workers.stack(k).rstrip()}")
    return "\n".join(parts)
