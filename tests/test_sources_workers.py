"""sources/workers.py: the lifecycle both kinds of workers share. They start once and live
across runs; a run ended whole is drained; one cut short stops them and the next run starts
new ones, which get every live arena; close() is final, twice is harmless, and in a forked
child (a copy of the owner) it does nothing."""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from engine_helpers import epoch_plan, make_workers, queue_of, ring_of

from feedline import FeedLoader, open_dataset
from feedline.sources.feed import Feed


def epoch_of(workers, memory, epoch):
    store = workers.spec.store
    feed = Feed(queue_of(workers, epoch), epoch.batches(store.labels, store.sizes), memory.ring)
    got = []
    while (slot := feed.next_filled()) is not None:
        got.append(slot.images.clone())
        feed.release(slot)
    return got


@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_workers_live_across_runs_and_are_renewed_after_one_cut_short(packed_lmdb, kind):
    store = open_dataset(str(packed_lmdb))
    epoch = epoch_plan(size=(16, 16))
    workers = make_workers(store, kind)
    memory = ring_of(workers, epoch)
    try:
        first = epoch_of(workers, memory, epoch)
        workers.end_run(whole=True)
        started = workers.procs[:] if kind == "processes" else workers._threads[:]
        assert len(started) == 2
        again = epoch_of(workers, memory, epoch)
        workers.end_run(whole=True)
        assert (workers.procs if kind == "processes" else workers._threads) == started   # the same workers
        workers.end_run(whole=False) if workers.running else None
        queue_of(workers, epoch)   # a run begun ...
        workers.end_run(whole=False)       # ... and cut short: stopped
        assert not workers.running and (workers.procs if kind == "processes" else workers._threads) == []
        renewed = epoch_of(workers, memory, epoch)   # new workers, given the ring's arenas again
        assert workers.running
    finally:
        workers.close()
    assert len(first) == len(again) == len(renewed) == 12
    assert all(np.array_equal(a.numpy(), b.numpy()) and np.array_equal(a.numpy(), c.numpy())
               for a, b, c in zip(first, again, renewed))


@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_close_is_final_and_twice_is_harmless(packed_lmdb, kind):
    workers = make_workers(open_dataset(str(packed_lmdb)), kind)
    workers.start()
    workers.close()
    workers.close()
    with pytest.raises(RuntimeError, match="the loader was closed"):
        workers.start()


def test_close_in_a_forked_child_leaves_the_owners_workers_alone(packed_lmdb):
    workers = make_workers(open_dataset(str(packed_lmdb)), "processes")
    workers.start()
    try:
        generation = int(workers.control[0])
        pid = os.fork()
        if pid == 0:   # the child: a finalizer copied over the fork would call this
            workers.close()
            os._exit(0 if workers.procs and not workers.closed else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert int(workers.control[0]) == generation and all(p.is_alive() for p in workers.procs)
        workers.sync(10)   # and they still answer
    finally:
        workers.close()


def sleepy(image, rng):
    time.sleep(1.5)
    return image


@pytest.mark.parametrize("engine", ["threads", "processes"])
def test_a_busy_workers_python_stack_can_be_read(packed_lmdb, engine):
    with FeedLoader(str(packed_lmdb), batch_size=2, size=16, num_workers=1, device="cpu", engine=engine,
                    transforms=[sleepy], shuffle=False) as loader:
        it = iter(loader)
        stacks = []
        threading.Timer(0.5, lambda: stacks.append(loader.source.workers.stack(0))).start()
        next(it)
        it.close()
    assert "in sleepy" in stacks[0] and "fill_chunk" in stacks[0]
