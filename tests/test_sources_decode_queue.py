"""DecodeQueue and Feed: plans are made by the consumer (never by a decode thread), an error
while planning a batch reaches the consumer in order, and the epoch never ends early and
silently."""
from __future__ import annotations

import threading

import pytest

from feedline import open_dataset
from feedline.augment import AugmentSpec
from feedline.choices import OnError, Order
from feedline.decoders import get_decoder
from feedline.plan import EpochPlan
from feedline.sources.decode_queue import DecodeQueue
from feedline.sources.feed import Feed
from feedline.sources.policy import BadRecordPolicy
from feedline.sources.ring import StagingRing
from feedline.stats import LoaderStats


def epoch_plan(order=Order.RANDOM) -> EpochPlan:
    return EpochPlan(AugmentSpec(size=(32, 32)), seed=0, epoch=0, order=order, batch_size=4, drop_last=False)


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
