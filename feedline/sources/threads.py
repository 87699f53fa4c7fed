"""ThreadBatches: per-image decoders on threads, feeding one way.

    plan (the epoch's order once, each batch as a slot frees) -> decode threads read,
    decode and write each sample into the slot -> the consumer receives the slot's
    tensors as they are (host), or the CUDA prefetcher copies the slot to the GPU and
    normalizes it there -> the slot is released and planned into again.
"""
from __future__ import annotations

from typing import Iterator

import torch

from ..config import LoaderConfig
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


class ThreadBatches:
    """A BatchSource of per-image decoders on ``config.num_threads`` threads.

    Shapes are known before the first epoch, so the ring has ``prefetch + 2`` slots from
    the start: memory stays flat however many epochs run. On the host the slots are the
    batches the consumer receives (host_output.py says what happens to a batch it keeps);
    for a CUDA device they are pinned uint8 buffers the prefetcher copies from. One ``run``
    at a time; its threads are joined when its iterator is closed or exhausted.
    """

    def __init__(self, store, config: LoaderConfig, decoder: Decoder):
        self.store, self.config, self.decoder = store, config, decoder
        slots, n, size = config.prefetch + 2, config.batch_size, config.augment.size
        if config.output.on_cuda:
            from .prefetcher import CudaPrefetcher
            self.ring = StagingRing(slots, n, size, pin=True)
            self.finisher = CudaPrefetcher(config.output)
        else:
            self.ring = OutputRing(slots, n, size, config.output, pin=config.pin_memory)
            self.finisher = None
        self.targets = target_spec(store, config)   # targets beyond the label live in the slots too
        if self.targets is not None:
            on_cuda = config.output.on_cuda
            self.ring = TargetedRing(self.ring, self.targets, pin=on_cuda or config.pin_memory,
                                     check_held=not on_cuda)

    def run(self, epoch: EpochPlan, start: int, stats: LoaderStats) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        c, store = self.config, self.store
        samples = epoch.samples(len(store))   # the epoch's order, computed once: for the plans and the read-ahead
        plans = epoch.batches(store.labels, store.sizes, start, samples=samples)
        policy = BadRecordPolicy(store, c.on_error, epoch, stats.ledger)
        if self.targets is not None:
            self.targets.size = tuple(epoch.spec.size)   # boxes in this epoch's output pixels
        # The read-ahead hints the store about the runs read next: speed, never data.
        with read_ahead(store, epoch, start, samples) as ahead, \
                DecodeQueue(store, self.decoder, policy, c.num_threads, stats) as queue:  # joined on break or error
            feed = Feed(queue, ahead.follow(plans), self.ring)
            if self.finisher is None:
                yield from lend(feed)
            else:
                yield from self.finisher.deliver(feed, self.ring, stats)

    def close(self) -> None:
        """Nothing outlives a run but the ring, which is freed with this object."""

    def __repr__(self) -> str:
        return f"ThreadBatches({self.decoder!r}, threads={self.config.num_threads})"
