"""The one worker loop: what every worker does, thread or process, until it is told to stop.

Messages in (from workers.py): ("run", RunSpec) starts a run; ("fill", Chunk) fills rows
of an arena with the one sample path (fill.py) and answers ChunkDone; ("arena", number,
format, ...) maps a Slot's memory; ("drop", number) forgets it; ("sync", token) answers
Synced once everything before it is handled; ("stop",) ends the loop. How a message
arrives (a queue of this process, a socket) is the inbox's business.
"""
from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Callable, Protocol

from .fill import ChunkDone, Control, RunSpec, SampleSpec, Synced, fill_chunk
from .rows import RowWriter


class Inbox(Protocol):
    def receive(self):
        """The next message; None when the worker must end (told to, or its consumer is gone)."""

    def answer(self, answer) -> None:
        """An answer to the consumer."""

    def memory(self, message):
        """The memory of an ("arena", ...) message, mapped in this worker."""


def serve(inbox: Inbox, spec: SampleSpec, control: Control,
          filling: Callable[[], AbstractContextManager] = nullcontext) -> None:
    """Handle messages until the inbox says stop; each chunk is filled inside ``filling()``
    (a worker thread's: fork_gate.py)."""
    writers: dict[int, RowWriter] = {}
    run: RunSpec | None = None
    while (message := inbox.receive()) is not None:
        kind = message[0]
        if kind == "fill":
            chunk = message[1]
            if run is None or run.generation != chunk.generation or not control.current(chunk.generation):
                inbox.answer(ChunkDone(chunk.ticket))   # a chunk of an abandoned run: nobody's
            else:
                with filling():
                    done = fill_chunk(chunk, spec, run, writers[chunk.arena], control)
                inbox.answer(done)
        elif kind == "run":
            run = message[1]
        elif kind == "arena":
            writers[message[1]] = RowWriter(message[2], inbox.memory(message))
        elif kind == "drop":
            writers.pop(message[1], None)
        elif kind == "sync":
            inbox.answer(Synced(message[1]))
        elif kind == "stop":
            return
