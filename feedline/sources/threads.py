"""ThreadBatches: per-image decoders on threads, feeding one way.

    plan (the epoch's order once, each batch as a Slot frees) -> decode threads read,
    decode and write each sample into the Slot -> the Finisher finishes the filled Slot
    (host: hands its tensors over; CUDA: copies and normalizes it on a side stream) -> the
    Slot is released back to the Feed and planned into again.
"""
from __future__ import annotations

import collections
import time
from typing import Iterator

import torch

from ..config import LoaderConfig
from ..decoders.base import Decoder
from ..plan import EpochPlan
from ..stats import LoaderStats
from .cuda_finisher import device_batches_bytes
from .decode_queue import DecodeQueue
from .feed import Feed
from .parts import EngineParts
from .readahead import read_ahead
from .ring import Ring, output_ring, ring_slots, staging_ring
from .rows import HostRows, StagingRows

LENT = 2   # a host batch the consumer holds, and the one before it, are still its own


class ThreadBatches:
    """A BatchSource of per-image decoders on ``config.num_threads`` threads.

    Shapes are known before the first epoch, so the ring has ``prefetch + 2`` Slots from
    the start: memory stays flat however many epochs run (with a size schedule the ring is
    remade when an epoch's size differs from the last one's, the old one freed first).
    On the host the Slots hold the batches the consumer receives (host_output.py says what
    happens to a batch it keeps); for a CUDA device they hold pinned uint8 pixels the CUDA
    Finisher copies. One ``run`` at a time; its threads are joined when its iterator is
    closed or exhausted.
    """

    def __init__(self, store, config: LoaderConfig, decoder: Decoder, parts: EngineParts):
        self.store, self.config, self.decoder = store, config, decoder
        self.transforming, self.targets, self.bad_records = parts.transforming, parts.targets, parts.bad_records
        self.finisher = parts.finisher
        self.rows = StagingRows() if config.output.on_cuda else HostRows(config.output)
        self.ring = self._ring(config.augment.size)

    @staticmethod
    def buffer_bytes(config: LoaderConfig) -> tuple[int, int]:
        """(host, device) bytes of its buffers: the ring (``prefetch + 2`` uint8 batches) and,
        on the host, the batch handed to the consumer in its dtype; on a CUDA device the
        CUDA Finisher's batches."""
        h, w = config.augment.size
        pixels, output = config.batch_size * h * w * 3, config.output
        delivered = 0 if output.on_cuda else pixels * output.dtype.itemsize
        return ring_slots(config.prefetch) * pixels + delivered, device_batches_bytes(config.prefetch, pixels, output)

    def _ring(self, size: tuple[int, int]) -> Ring:
        c, slots = self.config, ring_slots(self.config.prefetch)
        if c.output.on_cuda:
            return staging_ring(slots, c.batch_size, size, self.targets, pin=True)
        return output_ring(slots, c.batch_size, size, c.output, self.targets, pin=c.pin_memory)

    def run(self, epoch: EpochPlan, start: int, stats: LoaderStats) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        c, store, t = self.config, self.store, self.transforming
        if self.ring.size != epoch.spec.size:  # a size schedule moved: the old ring goes first
            self.ring = None
            self.ring = self._ring(epoch.spec.size)
        samples = epoch.samples(len(store))   # the epoch's order, computed once: for the plans and the read-ahead
        plans = epoch.batches(store.labels, store.sizes, start, samples=samples)
        policy = self.bad_records.policy(epoch, stats.ledger)
        # The read-ahead hints the store about the runs read next: speed, never data.
        with read_ahead(store, epoch, start, samples) as ahead, \
                DecodeQueue(store, self.decoder, policy, c.num_threads, stats, self.rows,
                            self.targets) as queue:  # joined on break or error
            draw = t.drawn if t is not None and t.per_sample else None
            feed = Feed(queue, ahead.follow(plans), self.ring, draw, self.targets)
            yield from deliver(feed, self.finisher, stats)

    def close(self) -> None:
        """Nothing outlives a run but the ring, which is freed with this object."""

    def __repr__(self) -> str:
        return f"ThreadBatches({self.decoder!r}, threads={self.config.num_threads})"


def deliver(feed: Feed, finisher, stats: LoaderStats) -> Iterator:
    """The filled Slots of ``feed``, in order, through ``finisher``. A Slot goes back to the
    feed once nothing reads it: a copied Slot once its copy has finished (the finisher's
    ``copied`` event); a Slot whose tensors were handed over when the consumer asks for the
    batch after next (by then it has let go of them, unless it keeps them: the ring then
    sees that). A finisher that ``overlaps`` gets the next Slot as soon as it is filled, so
    its work overlaps the consumer's step."""
    waiting = collections.deque()   # finished, not yet handed over
    copying = collections.deque()   # finished, their Slots' copy may still run
    lent = collections.deque()      # handed over as views of their Slots

    def accept(slot) -> None:
        t0 = time.perf_counter()
        finished = finisher.finish(slot)
        if finished.copied is not None:
            stats.add(copy_s=time.perf_counter() - t0)   # enqueue time: the copy itself is asynchronous
            copying.append(finished)
        waiting.append(finished)

    def release(wait: bool) -> None:
        while copying and finisher.copied(copying[0], wait):
            feed.release(copying.popleft().slot)
        while len(lent) >= LENT:
            feed.release(lent.popleft())

    try:
        while True:
            release(wait=False)
            if not waiting:
                release(wait=True)  # workers need free slots to make progress
                slot = feed.next_filled(block=True)
                if slot is None:
                    return
                accept(slot)
            if finisher.overlaps and (ahead := feed.next_filled(block=False)) is not None:
                accept(ahead)   # overlap the next copy with this step
            finished = waiting.popleft()
            if finished.copied is None:
                lent.append(finished.slot)
            yield finisher.hand_over(finished)
    finally:
        release(wait=True)  # no copy may still read a slot the workers refill
