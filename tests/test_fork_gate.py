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


class Holder:
    """A thread inside one side of the gate (``working`` or ``forking``) until released."""

    def __init__(self, side, order: list, wait_s: float = 10):
        self.order, self.inside, self.release = order, threading.Event(), threading.Event()

        def hold():
            with side():
                self.inside.set()
                self.release.wait(wait_s)
                self.order.append("holder done")

        self.thread = started(hold)
        assert self.inside.wait(10)

    def let_go(self) -> None:
        self.release.set()
        self.thread.join(10)


def held_back(holder: Holder, side) -> None:
    """A thread entering ``side`` waits until ``holder`` lets go, then goes in."""
    def enter():
        with side():
            holder.order.append("entered")

    entering = started(enter)
    entering.join(0.3)
    assert entering.is_alive() and holder.order == []
    holder.let_go()
    entering.join(10)
    assert holder.order == ["holder done", "entered"]


def test_a_fork_waits_for_a_worker_thread_inside_a_chunk():
    gate = ForkGate()
    held_back(Holder(gate.working, []), gate.forking)


def test_no_chunk_starts_while_a_fork_is_under_way():
    gate = ForkGate()
    held_back(Holder(gate.forking, []), gate.working)


def test_a_thread_stuck_in_a_chunk_holds_a_fork_back_only_so_long(monkeypatch):
    monkeypatch.setattr(fork_gate, "WAIT_S", 0.2)
    gate, order = ForkGate(), []
    stuck = Holder(gate.working, order, wait_s=30)
    with gate.forking():
        order.append("fork")
    stuck.let_go()
    assert order == ["fork", "holder done"]


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
