"""sources/feed.py: plans are made by the consumer (never by a decode thread), only as
Slots free, and an error while planning or allocating a batch reaches the consumer in order."""
from __future__ import annotations




import threading


import pytest


from feedline import open_dataset

from feedline.augment import AugmentSpec

from feedline.choices import OnError, Order

from feedline.config import OutputSpec

from feedline.decoders import get_decoder


from feedline.plan import EpochPlan

from feedline.sources.decode_queue import DecodeQueue

from feedline.sources.feed import Feed

from feedline.sources.policy import BadRecordPolicy

from feedline.sources.ring import Ring, output_slot, staging_ring

from feedline.sources.rows import HostRows, StagingRows

from feedline.stats import LoaderStats

def epoch_plan(order=Order.RANDOM) -> EpochPlan:
    return EpochPlan(AugmentSpec(size=(32, 32)), seed=0, epoch=0, order=order, batch_size=4, drop_last=False)

def queue_for(store, epoch, stats=None, threads=2) -> DecodeQueue:
    stats = stats or LoaderStats()
    return DecodeQueue(store, get_decoder("auto"), BadRecordPolicy(store, OnError.RAISE, epoch, stats.ledger),
                       num_threads=threads, stats=stats, rows=StagingRows())

def drain(feed: Feed) -> list[int]:
    got = []
    while (slot := feed.next_filled()) is not None:
        got.append(slot.plan.number)
        feed.release(slot)
    return got

def short_of_memory(slots: int, batch_size: int, size: tuple[int, int], output: OutputSpec) -> Ring:
    """The host ring, on a machine that cannot allocate the third batch's tensors."""
    made = []

    def make(number: int):
        made.append(number)
        if len(made) == 3:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes")
        return output_slot(number, batch_size, size, output, None)
    return Ring(slots, size, make, reuse_held=False)


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
        feed = Feed(queue, plans(), staging_ring(4, 4, (32, 32), None, pin=False))
        with pytest.raises(RuntimeError, match="batch 2"):
            while (slot := feed.next_filled()) is not None:
                got.append(slot.plan.number)
                feed.release(slot)
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
        feed = Feed(queue, plans(), staging_ring(3, 4, (32, 32), None, pin=False))
        first = feed.next_filled()
        assert first.plan.number == 0 and len(drawn_on) == 3
        feed.release(first)
        assert drain(feed) == list(range(1, epoch.count(len(store))))
    assert set(drawn_on) == {threading.current_thread().name}
    assert len(drawn_on) == epoch.count(len(store))


def test_a_batch_that_cannot_be_allocated_fails_in_order_instead_of_going_missing(packed_lmdb):
    """An allocation failure (out of memory) reaches the consumer after the batches before
    it, and the threads end. Before, the thread died with its slot: the other threads went
    on and the epoch silently skipped that batch (one thread: the consumer waited forever).
    The consumer runs in a thread here so that a hang fails."""
    store = open_dataset(str(packed_lmdb))
    epoch = EpochPlan(AugmentSpec(size=(32, 32)), seed=0, epoch=0, order=Order.SEQUENTIAL, batch_size=4,
                      drop_last=False)
    stats = LoaderStats()
    queue = DecodeQueue(store, get_decoder("opencv"), BadRecordPolicy(store, OnError.RAISE, epoch, stats.ledger),
                        num_threads=2, stats=stats, rows=HostRows(OutputSpec()))
    feed = Feed(queue, epoch.batches(store.labels, store.sizes), short_of_memory(4, 4, (32, 32), OutputSpec()))
    got, errors = [], []

    def consume():
        try:
            while (slot := feed.next_filled()) is not None:
                got.append((slot.plan.number, tuple(slot.images.shape)))
                feed.release(slot)
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
