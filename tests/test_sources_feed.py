"""sources/feed.py: plans are made by the consumer (never by a worker), only as Slots free,
and an error while planning or allocating a batch reaches the consumer in order, after the
batches before it."""
from __future__ import annotations

import threading

import pytest
from engine_helpers import epoch_plan, make_workers, queue_of, ring_of

from feedline import open_dataset
from feedline.sources.feed import Feed


def drain(feed: Feed) -> list[int]:
    got = []
    while (slot := feed.next_filled()) is not None:
        got.append(slot.plan.number)
        feed.release(slot)
    return got


@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_plans_are_drawn_by_the_consumer_only_as_slots_free(packed_lmdb, kind):
    """With three Slots and none released, three batches are planned, whatever the workers do."""
    store = open_dataset(str(packed_lmdb))
    epoch = epoch_plan()
    drawn_on = []

    def plans():
        for plan in epoch.batches(store.labels, store.sizes):
            drawn_on.append(threading.current_thread().name)
            yield plan

    workers = make_workers(store, kind)
    memory = ring_of(workers, epoch)
    try:
        feed = Feed(queue_of(workers, epoch), plans(), memory.ring)
        first = feed.next_filled()
        assert first.plan.number == 0 and len(drawn_on) == 3
        feed.release(first)
        assert drain(feed) == list(range(1, epoch.count(len(store))))
    finally:
        workers.close()
    assert set(drawn_on) == {threading.current_thread().name}
    assert len(drawn_on) == epoch.count(len(store))


def test_an_error_while_planning_reaches_the_consumer_after_the_batches_before_it(packed_lmdb):
    store = open_dataset(str(packed_lmdb))
    epoch = epoch_plan()

    def plans():
        for number, plan in enumerate(epoch.batches(store.labels, store.sizes)):
            if number == 2:
                raise RuntimeError("the plan of batch 2 failed")
            yield plan

    workers = make_workers(store)
    memory = ring_of(workers, epoch)
    got = []
    try:
        feed = Feed(queue_of(workers, epoch), plans(), memory.ring)
        with pytest.raises(RuntimeError, match="batch 2"):
            while (slot := feed.next_filled()) is not None:
                got.append(slot.plan.number)
                feed.release(slot)
    finally:
        workers.close()
    assert got == [0, 1]


def test_a_batch_that_cannot_be_allocated_fails_in_order_instead_of_going_missing(packed_lmdb):
    """An allocation failure (out of memory) reaches the consumer after the batches before it;
    the consumer runs in a thread here, so that a hang fails the test."""
    store = open_dataset(str(packed_lmdb))
    epoch = epoch_plan()
    workers = make_workers(store)
    memory = ring_of(workers, epoch, slots_ahead=2)
    make, made = memory.ring._make, []

    def short_of_memory(number):
        made.append(number)
        if len(made) == 3:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory")
        return make(number)

    memory.ring._make = short_of_memory
    feed = Feed(queue_of(workers, epoch), epoch.batches(store.labels, store.sizes), memory.ring)
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
    workers.close()
    assert not hung, "the consumer waited forever for a batch no worker would make"
    assert got == [(0, (4, 3, 32, 32)), (1, (4, 3, 32, 32))]   # the host batch: N x C x H x W over NHWC rows
    assert [str(e) for e in errors] == ["DefaultCPUAllocator: can't allocate memory"]
