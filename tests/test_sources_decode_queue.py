"""DecodeQueue: an error while planning a batch reaches the consumer in order; the epoch
never ends early and silently."""
from __future__ import annotations

import threading

import pytest

from feedline import open_dataset
from feedline.augment import AugmentSpec
from feedline.choices import OnError, Order
from feedline.decoders import get_decoder
from feedline.plan import EpochPlan
from feedline.sources.decode_queue import DecodeQueue
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
