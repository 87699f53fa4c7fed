"""DecodeQueue and Feed: plans are made by the consumer (never by a decode thread), an error
while planning a batch reaches the consumer in order, and the epoch never ends early and
silently."""
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
from feedline.sources.feed import Feed
from feedline.sources.host_output import OutputRing
from feedline.sources.policy import BadRecordPolicy
from feedline.sources.ring import StagingRing
from feedline.stats import LoaderStats


def epoch_plan(order=Order.RANDOM) -> EpochPlan:
    return EpochPlan(AugmentSpec(size=(32, 32), train=True), seed=0, epoch=0, order=order, batch_size=4, drop_last=False)


def queue_for(store, epoch, stats=None, threads=2) -> DecodeQueue:
    stats = stats or LoaderStats()
    return DecodeQueue(store, get_decoder("auto"), BadRecordPolicy(store, OnError.RAISE, epoch, stats.ledger),
                       num_threads=threads, stats=stats)


def drain(feed: Feed) -> list[int]:
    got = []
    while (job := feed.next_filled()) is not None:
        got.append(job.plan.number)
        feed.release(job.slot)
    return got


def test_a_planning_error_arrives_after_the_batches_before_it(photo_folder):
    store = open_dataset(str(photo_folder))
    epoch = epoch_plan()

    def plans():
        for number, plan in enumerate(epoch.batches(store.labels, store.sizes)):
            if number == 2:
                raise RuntimeError("the plan of batch 2 failed")
            yield plan

    got = []
    with queue_for(store, epoch) as queue:
        feed = Feed(queue, plans(), StagingRing(4, 4, (32, 32), pin=False))
        with pytest.raises(RuntimeError, match="batch 2"):
            while (job := feed.next_filled()) is not None:
                got.append(job.plan.number)
                feed.release(job.slot)
    assert got == [0, 1]
    assert not [t for t in threading.enumerate() if t.name.startswith("feedline-decode")]


def test_plans_are_drawn_by_the_consumer_only_as_slots_free(photo_folder):
    """Each plan is drawn on the consumer's thread, and only when a slot is free for it: with
    three slots and no slot released, three batches are planned, whatever the threads do."""
    store = open_dataset(str(photo_folder))
    epoch = epoch_plan()
    drawn_on = []

    def plans():
        for plan in epoch.batches(store.labels, store.sizes):
            drawn_on.append(threading.current_thread().name)
            yield plan

    with queue_for(store, epoch) as queue:
        feed = Feed(queue, plans(), StagingRing(3, 4, (32, 32), pin=False))
        first = feed.next_filled()
        assert first.plan.number == 0 and len(drawn_on) == 3
        feed.release(first.slot)
        assert drain(feed) == list(range(1, epoch.count(len(store))))
    assert set(drawn_on) == {threading.current_thread().name}
    assert len(drawn_on) == epoch.count(len(store))


def test_the_staging_ring_holds_what_the_decoder_gives(photo_folder):
    """Samples are decoded straight into the slot (uint8 H x W x 3), labels from the plan."""
    import numpy as np
    from feedline.decoders.base import Box
    store = open_dataset(str(photo_folder))
    epoch = epoch_plan(Order.SEQUENTIAL)
    ring = StagingRing(3, 4, (32, 32), pin=False)
    decoder = get_decoder("auto")
    with queue_for(store, epoch) as queue:
        feed = Feed(queue, epoch.batches(store.labels, store.sizes), ring)
        job = feed.next_filled()
        for j in range(4):
            want = np.empty((32, 32, 3), np.uint8)
            decoder.decode_into(store.read_checked(int(job.plan.indices[j])), Box(*job.plan.boxes[j]),
                                bool(job.plan.flips[j]), want)
            assert np.array_equal(ring.images_np[job.slot, j], want)
        assert ring.labels_np[job.slot].tolist() == job.plan.labels.tolist()


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


class ShortOfMemory(OutputRing):
    """The host ring, on a machine that cannot allocate the third batch's tensors."""

    def __init__(self, *args):
        super().__init__(*args)
        self.made = 0

    def target(self, slot):
        self.made += 1
        if self.made == 3:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes")
        return super().target(slot)


def test_a_batch_that_cannot_be_allocated_fails_in_order_instead_of_going_missing(packed_lmdb):
    """An allocation failure (out of memory) reaches the consumer after the batches before
    it, and the threads end. Before, the thread died with its slot: the other threads went
    on and the epoch silently skipped that batch (one thread: the consumer waited forever).
    The consumer runs in a thread here so that a hang fails."""
    store = open_dataset(str(packed_lmdb))
    epoch = EpochPlan(AugmentSpec(size=(32, 32), train=True), seed=0, epoch=0, order=Order.SEQUENTIAL, batch_size=4,
                      drop_last=False)
    stats = LoaderStats()
    queue = DecodeQueue(store, get_decoder("opencv"), BadRecordPolicy(store, OnError.RAISE, epoch, stats.ledger),
                        num_threads=2, stats=stats)
    feed = Feed(queue, epoch.batches(store.labels, store.sizes), ShortOfMemory(4, 4, (32, 32), OutputSpec()))
    got, errors = [], []

    def consume():
        try:
            while (batch := feed.next_filled()) is not None:
                got.append((batch.plan.number, tuple(batch.target.images.shape)))
                feed.release(batch.slot)
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
