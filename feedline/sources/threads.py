"""ThreadBatches: per-image decoders on threads, feeding one way.

    plan (the epoch's order once, each batch as a slot frees) -> decode threads read,
    decode and write each sample into the slot -> the consumer receives the slot's
    tensors as they are (host), or the CUDA prefetcher copies the slot to the GPU and
    normalizes it there -> the slot is released and planned into again.
"""
from __future__ import annotations

from typing import Iterator

import torch

from ..config import LoaderConfig, ring_slots
from ..decoders.base import Decoder
from ..plan import EpochPlan
from ..stats import LoaderStats
from .decode_queue import DecodeQueue
from .feed import Feed
from .host_output import OutputRing, lend
from .policy import BadRecordPolicy
from .readahead import read_ahead
from .ring import StagingRing
from .target_batches import target_spec
from .targets_buffers import TargetedRing
from .transforming import transforming


class ThreadBatches:
    """A BatchSource of per-image decoders on ``config.num_threads`` threads.

    Shapes are known before the first epoch, so the ring has ``prefetch + 2`` slots from
    the start: memory stays flat however many epochs run (with a size schedule the ring is
    reallocated when an epoch's size differs from the last one's, the old one freed first).
    On the host the slots are the batches the consumer receives (host_output.py says what
    happens to a batch it keeps);
    for a CUDA device they are pinned uint8 buffers the prefetcher copies from. One ``run``
    at a time; its threads are joined when its iterator is closed or exhausted.
    """

    def __init__(self, store, config: LoaderConfig, decoder: Decoder):
        self.store, self.config, self.decoder = store, config, decoder
        self.transforming = transforming(store, config)
        self.finisher = None
        if config.output.on_cuda:
            from .prefetcher import CudaPrefetcher
            self.finisher = CudaPrefetcher(config.output, self.transforming)
        self.targets = target_spec(store, config)   # targets beyond the label live in the slots too
        self.ring = self._ring(config.augment.size)

    def _ring(self, size: tuple[int, int]):
        c, slots = self.config, ring_slots(self.config)
        if c.output.on_cuda:
            ring = StagingRing(slots, c.batch_size, size, pin=True)
        else:
            ring = OutputRing(slots, c.batch_size, size, c.output, pin=c.pin_memory)
        if self.targets is not None:
            ring = TargetedRing(ring, self.targets, pin=c.output.on_cuda or c.pin_memory,
                                check_held=not c.output.on_cuda)
        return ring

    def run(self, epoch: EpochPlan, start: int, stats: LoaderStats) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        c, store = self.config, self.store
        if self.ring.size != epoch.spec.size:  # a size schedule moved: the old ring goes first
            self.ring = None
            self.ring = self._ring(epoch.spec.size)
        t = self.transforming
        samples = epoch.samples(len(store))   # the epoch's order, computed once: for the plans and the read-ahead
        plans = epoch.batches(store.labels, store.sizes, start, samples=samples)
        policy = BadRecordPolicy(store, c.on_error, epoch, stats.ledger)
        # The read-ahead hints the store about the runs read next: speed, never data.
        with read_ahead(store, epoch, start, samples) as ahead, \
                DecodeQueue(store, self.decoder, policy, c.num_threads, stats) as queue:  # joined on break or error
            feed = Feed(queue, ahead.follow(plans), self.ring, t.drawn if t is not None and t.per_sample else None)
            if self.finisher is None:
                yield from lend(feed, t.on_batch if t is not None and t.batch.steps else None)
            else:
                yield from self.finisher.deliver(feed, self.ring, stats)

    def close(self) -> None:
        """Nothing outlives a run but the ring, which is freed with this object."""

    def __repr__(self) -> str:
        return f"ThreadBatches({self.decoder!r}, threads={self.config.num_threads})"
