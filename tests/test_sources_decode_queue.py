"""DecodeQueue and Feed: plans are made by the consumer (never by a decode thread), an error
while planning a batch reaches the consumer in order, and the epoch never ends early and
silently."""
from __future__ import annotations

import subprocess

import sys

import textwrap

import threading

import time


from storefiles import make_records, write_lmdb

from feedline import FeedLoader, open_dataset

from feedline.augment import AugmentSpec

from feedline.choices import OnError, Order


from feedline.decoders import get_decoder

from feedline.errors import DecodeError

from feedline.plan import EpochPlan

from feedline.sources.decode_queue import DecodeQueue

from feedline.sources.feed import Feed

from feedline.sources.policy import BadRecordPolicy

from feedline.sources.ring import staging_ring

from feedline.sources.rows import StagingRows

from feedline.stats import LoaderStats

def epoch_plan(order=Order.RANDOM) -> EpochPlan:
    return EpochPlan(AugmentSpec(size=(32, 32), train=True), seed=0, epoch=0, order=order, batch_size=4, drop_last=False)

def queue_for(store, epoch, stats=None, threads=2) -> DecodeQueue:
    stats = stats or LoaderStats()
    return DecodeQueue(store, get_decoder("auto"), BadRecordPolicy(store, OnError.RAISE, epoch, stats.ledger),
                       num_threads=threads, stats=stats, rows=StagingRows())


def test_the_staging_ring_holds_what_the_decoder_gives(photo_folder):
    """Samples are decoded straight into the slot (uint8 H x W x 3), labels from the plan."""
    import numpy as np
    from feedline.decoders.base import Box
    store = open_dataset(str(photo_folder))
    epoch = epoch_plan(Order.SEQUENTIAL)
    ring = staging_ring(3, 4, (32, 32), None, pin=False)
    decoder = get_decoder("auto")
    with queue_for(store, epoch) as queue:
        feed = Feed(queue, epoch.batches(store.labels, store.sizes), ring)
        slot = feed.next_filled()
        assert slot is ring.slot(slot.number)
        for j in range(4):
            want = np.empty((32, 32, 3), np.uint8)
            decoder.decode_into(store.read_checked(int(slot.plan.indices[j])), Box(*slot.plan.boxes[j]),
                                bool(slot.plan.flips[j]), want)
            assert np.array_equal(slot.images[j].numpy(), want)
        assert slot.labels.tolist() == slot.plan.labels.tolist()


def test_a_loader_left_open_does_not_keep_the_process_alive(packed_lmdb):
    """A script that stops after one batch, without close() or the end of the epoch, exits:
    the decode threads do not hold the interpreter open."""
    # In this process first (where mutation testing sees which code a test reaches): the
    # decode threads a loader starts are daemons.
    loader = FeedLoader(str(packed_lmdb), batch_size=4, size=32, num_workers=2, device="cpu", decoder="opencv",
                        engine="threads")
    it = iter(loader)
    next(it)
    threads = [t for t in threading.enumerate() if t.name.startswith("feedline-decode")]
    assert len(threads) == 2 and all(t.daemon for t in threads)
    it.close()
    script = textwrap.dedent(f"""
        import sys
        from feedline import FeedLoader
        loader = FeedLoader({str(packed_lmdb)!r}, batch_size=4, size=32, num_workers=2, device="cpu",
                            decoder="opencv")
        it = iter(loader)
        next(it)
        sys.modules["__main__"].keep = (loader, it)   # alive until the interpreter exits
        print("done", flush=True)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "done", result.stderr[-2000:]


def test_the_thread_time_of_each_stage_is_a_share_of_the_epoch(packed_lmdb):
    """read_s, decode_s and copy_s are seconds the decode threads spent in each stage:
    positive, and none more than the epoch's wall time times the number of threads."""
    loader = FeedLoader(str(packed_lmdb), batch_size=8, size=32, num_workers=2, device="cpu", decoder="opencv",
                        engine="threads")
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
                        num_workers=1, device="cpu", decoder="opencv")
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
