"""Batch sources: what turns an epoch's sample plans into finished batches.

Which source (engine=) and which decoder are chosen in feedline.selection; make_source
builds the chosen one. Every source implements the same small protocol, so FeedLoader
never asks which one it holds. Sources differ in speed, never in data: the same (seed, epoch, index) gives the
same crop, flip and label from each, and a bad record is reported in the same ledger
with the same substitute.

- ThreadBatches (threads.py): per-image CPU decoders on threads, a ring of pinned batch
  buffers, and a host or CUDA-stream finisher.
- DaliBatches (dali.py): one NVIDIA DALI pipeline (nvJPEG on a GPU, CPU operators without).
- GpuDecodeBatches (gpu_decode.py): nvImageCodec decoding the crops on the GPU.
"""
from __future__ import annotations

from typing import Iterator, Protocol

import torch

from ..choices import Engine
from ..config import LoaderConfig
from ..decoders.base import Decoder
from ..plan import EpochPlan
from ..selection import resolve_engine_and_decoder
from ..stats import LoaderStats


class BatchSource(Protocol):
    """Turns the batch plans of one epoch into (images, labels) batches."""

    def run(self, epoch: EpochPlan, start: int, stats: LoaderStats) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The batches of ``epoch`` from batch number ``start`` on, in order. Bad records go
        into ``stats.ledger`` (and are raised or substituted as the config says); stage
        times into ``stats``. Closing the iterator stops the work it started."""

    def close(self) -> None:
        """Release threads, pipelines and buffers. The source is not used afterwards."""


def make_source(store, config: LoaderConfig, decoder: Decoder | None = None) -> BatchSource:
    """The source for ``config.engine`` (already resolved: never "auto"). ``decoder``, the
    thread engine's Decoder, is chosen by feedline.selection; without one, the decoder
    ``config.decoder`` names is chosen there for this store."""
    if config.engine is Engine.DALI:
        from .dali import DaliBatches
        return DaliBatches(store, config)
    if config.engine is Engine.GPU:
        from .gpu_decode import GpuDecodeBatches
        return GpuDecodeBatches(store, config)
    from .threads import ThreadBatches
    if decoder is None:
        decoder = resolve_engine_and_decoder(config.engine, config.decoder, config.output.device, store).decoder
    return ThreadBatches(store, config, decoder)


__all__ = ["BatchSource", "make_source"]
