"""ThreadBatches: decode threads fill a ring of (pinned) uint8 batch buffers, then a
finisher turns each filled slot into the consumer's tensor: on the host in the decode
threads themselves, or on a CUDA side stream while the previous step computes."""
from __future__ import annotations

from typing import Iterator

import torch

from ..config import LoaderConfig
from ..decoders.base import Decoder
from ..plan import EpochPlan
from ..stats import LoaderStats
from .decode_queue import DecodeQueue
from .readahead import read_ahead
from .ring import BatchRing


def make_finisher(config: LoaderConfig):
    if config.output.on_cuda:
        from .prefetcher import CudaPrefetcher
        return CudaPrefetcher(config.output)
    from .host_finisher import HostFinisher
    return HostFinisher(config.output, config.augment.size)


class ThreadBatches:
    """A BatchSource of per-image decoders on ``config.num_threads`` threads.

    Shapes are known before the first epoch, so the ring of ``prefetch + 2`` batch
    buffers is allocated here, once: memory stays flat however many epochs run. One
    ``run`` at a time; its threads are joined when its iterator is closed or exhausted.
    """

    def __init__(self, store, config: LoaderConfig, decoder: Decoder):
        self.store, self.config, self.decoder = store, config, decoder
        pin = config.pin_memory or config.output.on_cuda
        self.ring = BatchRing(config.prefetch + 2, config.batch_size, config.augment.size, pin)
        self.finisher = make_finisher(config)

    def run(self, epoch: EpochPlan, start: int, stats: LoaderStats) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        c, store = self.config, self.store
        with read_ahead(store, epoch, start) as ahead:  # store hints for the runs read next: speed, never data
            plans = ahead.follow(epoch.batches(store.labels, store.sizes, start))
            queue = DecodeQueue(store, self.decoder, self.ring, plans, epoch, c.num_threads, c.on_error, stats,
                                converter=self.finisher.sample_converter)
            try:
                yield from self.finisher.deliver(queue, self.ring, stats)
            finally:
                queue.close()  # stops and joins the threads, also on break or error

    def close(self) -> None:
        """Nothing outlives a run but the ring, which is freed with this object."""

    def __repr__(self) -> str:
        return f"ThreadBatches({self.decoder!r}, threads={self.config.num_threads})"
