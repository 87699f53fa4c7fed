"""DecodeQueue: an error while planning or allocating a batch reaches the consumer in order; the
epoch never ends early and silently; raise mode stops a failed batch at once; the decode
threads are daemons and their time per stage is a share of the epoch."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest
from storefiles import make_records, write_lmdb

from feedline import FeedLoader, open_dataset
from feedline.augment import AugmentSpec
from feedline.choices import OnError, Order
from feedline.config import OutputSpec
from feedline.decoders import get_decoder
from feedline.errors import DecodeError
from feedline.plan import EpochPlan
from feedline.sources.decode_queue import DecodeQueue
from feedline.sources.host_finisher import HostFinisher
from feedline.sources.ring import BatchRing
from feedline.stats import LoaderStats


def test_a_planning_error_arrives_after_the_batches_before_it(photo_folder):
    store = open_dataset(str(photo_folder))
    epoch = EpochPlan(AugmentSpec(size=(32, 32)), seed=0, epoch=0, order=Order.RANDOM, batch_size=4,
                      drop_last=False)

    def plans():
        for number, plan in enumerate(epoch.batches(store.labels, store.sizes)):
            if number == 2:
                raise RuntimeError("the plan of batch 2 failed")
            yield plan

    queue = DecodeQueue(store, get_decoder("auto"), BatchRing(4, 4, (32, 32), pin=False), plans(), epoch,
                        num_threads=2, on_error=OnError.RAISE, stats=LoaderStats())
    got = []
    try:
        with pytest.raises(RuntimeError, match="batch 2"):
            while (batch := queue.next_filled()) is not None:
                got.append(batch.plan.number)
                queue.release(batch.slot)
    finally:
        queue.close()
    assert got == [0, 1]
    assert not [t for t in threading.enumerate() if t.name.startswith("feedline-decode")]


def test_a_loader_left_open_does_not_keep_the_process_alive(packed_lmdb):
    """A script that stops after one batch, without close() or the end of the epoch, exits:
    the decode threads do not hold the interpreter open."""
    # In this process first (where mutation testing sees which code a test reaches): the
    # decode threads a loader starts are daemons.
    loader = FeedLoader(str(packed_lmdb), batch_size=4, size=32, num_threads=2, device="cpu", decoder="opencv")
    it = iter(loader)
    next(it)
    threads = [t for t in threading.enumerate() if t.name.startswith("feedline-decode")]
    assert len(threads) == 2 and all(t.daemon for t in threads)
    it.close()
    script = textwrap.dedent(f"""
        import sys
        from feedline import FeedLoader
        loader = FeedLoader({str(packed_lmdb)!r}, batch_size=4, size=32, num_threads=2, device="cpu",
                            decoder="opencv")
        it = iter(loader)
        next(it)
        sys.modules["__main__"].keep = (loader, it)   # alive until the interpreter exits
        print("done", flush=True)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "done", result.stderr[-2000:]


class ShortOfMemory(HostFinisher):
    """The host finisher, on a machine that cannot allocate the third batch's output."""

    def __init__(self, *args):
        super().__init__(*args)
        self.made = 0

    def new_batch(self, n):
        self.made += 1
        if self.made == 3:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes")
        return super().new_batch(n)


def test_a_batch_that_cannot_be_allocated_fails_in_order_instead_of_going_missing(packed_lmdb):
    """An allocation failure in a decode thread (out of memory) reaches the consumer after
    the batches before it, and the threads end. Before, the thread died with its slot: the
    other threads went on and the epoch silently skipped that batch (one thread: the
    consumer waited forever). The consumer runs in a thread here so that a hang fails."""
    store = open_dataset(str(packed_lmdb))
    epoch = EpochPlan(AugmentSpec(size=(32, 32)), seed=0, epoch=0, order=Order.SEQUENTIAL, batch_size=4,
                      drop_last=False)
    converter = ShortOfMemory(OutputSpec(), (32, 32))
    queue = DecodeQueue(store, get_decoder("opencv"), BatchRing(4, 4, (32, 32), pin=False),
                        epoch.batches(store.labels, store.sizes), epoch, num_threads=2, on_error=OnError.RAISE,
                        stats=LoaderStats(), converter=converter)
    got, errors = [], []

    def consume():
        try:
            while (batch := queue.next_filled()) is not None:
                got.append((batch.plan.number, tuple(batch.output.shape)))
                queue.release(batch.slot)
        except RuntimeError as exc:
            errors.append(exc)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    consumer.join(timeout=60)
    hung = consumer.is_alive()
    queue.close()   # wakes a consumer still waiting (next_filled returns None) and joins the threads
    consumer.join()
    assert not hung, "the consumer waited forever for a batch no thread would make"
    assert got == [(0, (4, 3, 32, 32)), (1, (4, 3, 32, 32))]
    assert [str(e) for e in errors] == ["DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes"]
    assert not [t for t in threading.enumerate() if t.name.startswith("feedline-decode")]


def test_the_thread_time_of_each_stage_is_a_share_of_the_epoch(packed_lmdb):
    """read_s, decode_s and copy_s are seconds the decode threads spent in each stage:
    positive, and none more than the epoch's wall time times the number of threads."""
    loader = FeedLoader(str(packed_lmdb), batch_size=8, size=32, num_threads=2, device="cpu", decoder="opencv")
    started = time.perf_counter()
    assert sum(len(y) for _, y in loader) == 48
    elapsed = time.perf_counter() - started
    s = loader.stats
    for stage in (s.read_s, s.decode_s, s.copy_s):
        assert 0 < stage <= 2 * elapsed
    loader.close()


def test_raise_mode_stops_decoding_a_failed_batch_and_says_so_at_once(tmp_path):
    """Records 8 and 10 of the last batch are not JPEGs. One decode thread: after record 8
    fails, the rest of that batch is left undecoded (the ledger names record 8 only) and the
    consumer waiting for the batch hears of the failure at once (it ran in a thread here, so
    a consumer left waiting fails the test instead of hanging it)."""
    records = make_records(12, 3)
    for index in (8, 10):
        records.images[index] = b"\xff\xd8\xff\xe0 this is not really a jpeg" * 10
    loader = FeedLoader(write_lmdb(tmp_path / "bad.lmdb", records), batch_size=4, size=16, shuffle=False,
                        num_threads=1, device="cpu", decoder="opencv")
    got, errors = [], []

    def consume():
        try:
            got.extend(y.tolist() for _, y in loader)
        except DecodeError as exc:
            errors.append(exc)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    consumer.join(timeout=60)
    hung = consumer.is_alive()
    loader.close()
    assert not hung, "the consumer was never told that the batch failed"
    assert got == [[0, 1, 2, 0], [1, 2, 0, 1]]
    assert [e.index for e in errors] == [8]
    assert [(r.index, r.batch, r.position) for r in loader.stats.bad_records] == [(8, 2, 0)]
