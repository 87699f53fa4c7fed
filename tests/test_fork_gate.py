"""sources/fork_gate.py: a fork of worker processes never happens while a worker thread of
this process is inside a chunk (where a decoder may hold a lock the child would inherit
locked), no chunk starts while a fork is under way, neither waits for good, and a worker's
garbage collector never finalizes the training process's objects."""
from __future__ import annotations

import gc
import os
import threading

from feedline import FeedLoader
from feedline.sources import fork_gate
from feedline.sources.fork_gate import GATE, ForkGate


def started(target) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_a_fork_waits_for_a_worker_thread_inside_a_chunk():
    gate, inside, release, order = ForkGate(), threading.Event(), threading.Event(), []

    def chunk():
        with gate.working():
            inside.set()
            release.wait(10)
            order.append("chunk done")

    def fork():
        with gate.forking():
            order.append("fork")

    worker = started(chunk)
    assert inside.wait(10)
    forker = started(fork)
    forker.join(0.3)
    assert forker.is_alive() and order == []
    release.set()
    worker.join(10)
    forker.join(10)
    assert order == ["chunk done", "fork"]


def test_no_chunk_starts_while_a_fork_is_under_way():
    gate, forking, release, order = ForkGate(), threading.Event(), threading.Event(), []

    def fork():
        with gate.forking():
            forking.set()
            release.wait(10)
            order.append("forked")

    def chunk():
        with gate.working():
            order.append("chunk")

    forker = started(fork)
    assert forking.wait(10)
    worker = started(chunk)
    worker.join(0.3)
    assert worker.is_alive() and order == []
    release.set()
    forker.join(10)
    worker.join(10)
    assert order == ["forked", "chunk"]


def test_a_thread_stuck_in_a_chunk_holds_a_fork_back_only_so_long(monkeypatch):
    monkeypatch.setattr(fork_gate, "WAIT_S", 0.2)
    gate, inside, release, order = ForkGate(), threading.Event(), threading.Event(), []

    def stuck():
        with gate.working():
            inside.set()
            release.wait(30)
            order.append("chunk done")

    worker = started(stuck)
    assert inside.wait(10)
    with gate.forking():
        order.append("fork")
    release.set()
    worker.join(10)
    assert order == ["fork", "chunk done"]


def test_the_cpu_engines_worker_threads_fill_their_chunks_inside_the_gate(packed_lmdb):
    inside, release, forked = threading.Event(), threading.Event(), threading.Event()

    def held(image, rng):   # a per-sample transform: it runs inside the chunk
        inside.set()
        release.wait(10)
        return image

    def fork():
        with GATE.forking():
            forked.set()

    with FeedLoader(str(packed_lmdb), batch_size=2, num_workers=0, device="cpu", transforms=[held]) as loader:
        batches = []
        consumer = started(lambda: batches.append(next(iter(loader))))
        assert inside.wait(30)
        forker = started(fork)
        assert not forked.wait(0.3)   # a fork now would copy the worker thread's locks mid-sample
        release.set()
        forker.join(10)
        consumer.join(60)
    assert forked.is_set() and len(batches) == 1


class Witness:
    """Garbage in a reference cycle: says in which process its finalizer runs."""

    def __init__(self, path):
        self.path, self.cycle = path, self

    def __del__(self):
        with open(self.path, "a") as f:
            f.write(f"{os.getpid()}\n")


def collect(image, rng):   # a per-sample transform: the worker's collector runs at every sample
    gc.collect()
    return image


def test_a_workers_collector_never_finalizes_what_it_inherited(packed_lmdb, tmp_path):
    """An unreachable object not yet collected in the training process (a DALI pipeline a
    loader left behind: its destructor waits for good on threads a child does not have) is
    finalized there, never in a forked worker."""
    said = tmp_path / "finalized"
    gc.disable()   # the garbage is still there when the workers are forked
    try:
        Witness(said)
        with FeedLoader(str(packed_lmdb), batch_size=4, num_workers=2, engine="processes", device="cpu",
                        transforms=[collect]) as loader:
            next(iter(loader))
    finally:
        gc.enable()
    gc.collect()
    assert said.read_text().split() == [str(os.getpid())]
