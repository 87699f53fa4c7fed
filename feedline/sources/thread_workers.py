"""Workers on threads of this process (``num_workers=0``: DataLoader's "in this process",
where a debugger can follow a transform). Each thread runs the one worker loop
(worker_loop.py) on a queue of its own; every answer goes into one queue the consumer
reads. They share this process's GIL: the decoders release it, a Python transform does not.
"""
from __future__ import annotations

import queue
import sys
import threading
import traceback

from ..core.errors import WorkerError
from .arena import Arena
from .fill import Control, SampleSpec
from .fork_gate import GATE
from .rows import RowFormat
from .worker_loop import serve
from .workers import Workers


class _Ended:
    """A thread's last answer when its loop raised: a bug, reported, never a hang."""

    def __init__(self, error: BaseException):
        self.error = error


class QueueInbox:
    """A worker thread's inbox: its own queue in, the shared queue out."""

    def __init__(self, number: int, inbox: queue.SimpleQueue, outbox: queue.SimpleQueue):
        self.number, self.inbox, self.outbox = number, inbox, outbox

    def receive(self):
        message = self.inbox.get()
        return None if message[0] == "stop" else message

    def answer(self, answer) -> None:
        self.outbox.put((self.number, answer))

    def memory(self, message):
        return message[3]


class ThreadWorkers(Workers):
    kind = "worker thread"
    shares_memory = False   # the threads write into this process's memory

    def __init__(self, spec: SampleSpec, count: int):
        self._threads: list[threading.Thread] = []
        self._inboxes: list[queue.SimpleQueue] = []
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        super().__init__(spec, count)

    def _start(self) -> None:
        self._outbox = queue.SimpleQueue()
        self._inboxes = [queue.SimpleQueue() for _ in range(self.count)]
        self._threads = [threading.Thread(target=self._loop, args=(k,), name=f"feedline-decode-{k}", daemon=True)
                         for k in range(self.count)]
        for t in self._threads:
            t.start()

    def _loop(self, k: int) -> None:
        try:
            serve(QueueInbox(k, self._inboxes[k], self._outbox), self.spec, Control(self.control, k), GATE.working)
        except BaseException as exc:   # reaches the consumer as this worker's end
            self._outbox.put((k, _Ended(exc)))

    def _post(self, k: int, message) -> None:
        self._inboxes[k].put(message)

    def _post_arena(self, k: int, number: int, fmt: RowFormat, arena: Arena) -> None:
        self._inboxes[k].put(("arena", number, fmt, arena.memory))

    def _receive(self, timeout: float | None) -> list[tuple[int, object]]:
        try:
            answers = [self._outbox.get(timeout=timeout)]
        except queue.Empty:
            return []
        while True:
            try:
                answers.append(self._outbox.get_nowait())
            except queue.Empty:
                break
        for k, answer in answers:
            if isinstance(answer, _Ended):
                error = WorkerError(f"feedline {self.name(k)} ended {self.holding(k)}: "
                                    f"{type(answer.error).__name__}: {answer.error}")
                error.__cause__ = answer.error
                self.died(error)
        return answers

    def _stop(self, kill: bool) -> None:
        """Tell every thread to stop and join it (a thread cannot be killed: it finishes its sample)."""
        for inbox in self._inboxes:
            inbox.put(("stop",))
        while self._threads:
            thread = self._threads.pop()
            if thread.is_alive() and thread is not threading.current_thread():   # not one a Ctrl-C kept from starting
                thread.join()

    def name(self, k: int) -> str:
        return f"worker thread {k}"

    def stack(self, k: int) -> str:
        frame = sys._current_frames().get(self._threads[k].ident) if k < len(self._threads) else None
        return "".join(traceback.format_stack(frame)) if frame is not None else "(not running)"
