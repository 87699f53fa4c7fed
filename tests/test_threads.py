"""sources/threads.py: ThreadBatches and its deliver(): a Slot handed to a host consumer goes
back to the Feed only when the consumer asks for the batch after next (it holds the batch it
got and may still read the one before), in order, and every Slot comes back."""
from __future__ import annotations

from feedline import open_dataset
from feedline.augment import AugmentSpec
from feedline.choices import OnError, Order
from feedline.config import OutputSpec
from feedline.decoders import get_decoder
from feedline.plan import EpochPlan
from feedline.sources.decode_queue import DecodeQueue
from feedline.sources.feed import Feed
from feedline.sources.finisher import Filled, HostFinisher
from feedline.sources.policy import BadRecordPolicy
from feedline.sources.ring import output_ring
from feedline.sources.rows import HostRows
from feedline.sources.threads import ThreadBatches, deliver
from feedline.stats import LoaderStats


class RecordingFeed(Feed):
    """A Feed that also notes which batch each released Slot held."""

    def __init__(self, *args):
        super().__init__(*args)
        self.released = []

    def release(self, slot) -> None:
        self.released.append(slot.plan.number)
        super().release(slot)


def test_a_host_slot_is_released_when_the_batch_after_next_is_asked_for(packed_lmdb):
    store = open_dataset(str(packed_lmdb))
    epoch = EpochPlan(AugmentSpec(size=(16, 16)), seed=0, epoch=0, order=Order.SEQUENTIAL, batch_size=4,
                      drop_last=False)
    output, stats = OutputSpec(device="cpu"), LoaderStats()
    policy = BadRecordPolicy(store, OnError.RAISE, epoch, stats.ledger)
    with DecodeQueue(store, get_decoder("opencv"), policy, 2, stats, HostRows(output)) as queue:
        feed = RecordingFeed(queue, epoch.batches(store.labels, store.sizes), output_ring(3, 4, (16, 16), output, None))
        batches = deliver(feed, HostFinisher(output, None, None, Filled(True, True)), stats)
        for k, (images, labels) in enumerate(batches):
            assert feed.released == list(range(max(0, k - 1))), f"batch {k}"
            assert images.shape == (4, 3, 16, 16) and len(labels) == 4
    assert k + 1 == epoch.count(len(store))


def test_the_engine_declares_its_buffers(packed_lmdb):
    from feedline.config import LoaderConfig
    config = LoaderConfig(batch_size=8, prefetch=3, augment=AugmentSpec(size=(32, 40)), output=OutputSpec(device="cpu"))
    pixels = 8 * 32 * 40 * 3
    assert ThreadBatches.buffer_bytes(config) == (5 * pixels + 4 * pixels, 0)   # 5 uint8 slots, one float32 batch
