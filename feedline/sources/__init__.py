"""Batch sources: what turns an epoch's sample plans into finished batches.

Which source (engine=) and which decoder are chosen in feedline.selection; make_source
builds the chosen engine and, once, what it is handed (parts.py): the transforms, the
targets, the bad-record rule and the Finisher. Engines fill Slots (slot.py); the Finisher
finishes them (finisher.py, cuda_finisher.py). Every source implements the same small
protocol, so FeedLoader never asks which one it holds. Sources differ in speed, never in
data: the same (seed, epoch, index) gives the same crop, flip and label from each, and a
bad record is reported in the same ledger with the same substitute.

- ThreadBatches (threads.py): per-image CPU decoders on threads filling a ring of Slots.
- ProcessBatches (processes.py): the same decoders in worker processes, each with its own
  GIL, filling a ring of Slots in shared memory (plans in, slot numbers out).
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
from ..stats import LoaderStats
from .finisher import Filled, HostFinisher
from .parts import EngineParts
from .policy import BadRecords
from .target_batches import target_spec
from .transforming import transforming


class BatchSource(Protocol):
    """Turns the batch plans of one epoch into (images, labels) batches."""

    def run(self, epoch: EpochPlan, start: int, stats: LoaderStats) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The batches of ``epoch`` from batch number ``start`` on, in order. Bad records go
        into ``stats.ledger`` (and are raised or substituted as the config says); stage
        times into ``stats``. Closing the iterator stops the work it started."""

    def close(self) -> None:
        """Release threads, pipelines and buffers. The source is not used afterwards."""


def engine_type(engine: Engine) -> type:
    """The class of the engine ``engine`` (resolved: never "auto"); each declares the bytes
    of its buffers (``buffer_bytes(config)``: host, device)."""
    if engine is Engine.DALI:
        from .dali import DaliBatches
        return DaliBatches
    if engine is Engine.GPU:
        from .gpu_decode import GpuDecodeBatches
        return GpuDecodeBatches
    if engine is Engine.PROCESSES:
        from .processes import ProcessBatches
        return ProcessBatches
    from .threads import ThreadBatches
    return ThreadBatches


def make_source(store, config: LoaderConfig, decoder: Decoder | None = None) -> BatchSource:
    """The source for ``config.engine`` (already resolved: never "auto"), with its parts
    built once. ``decoder``: the thread engine's Decoder, chosen by feedline.selection."""
    t = transforming(store, config)
    targets = target_spec(store, config)
    output = config.output
    bad = BadRecords(store, config.on_error)
    if config.engine is Engine.DALI:
        from .dali import DaliBatches
        # DALI normalizes in its pipeline, unless transforms follow it: then it gives pixels
        finisher = HostFinisher(output, t, targets, Filled(normalized=t is None, samples_applied=False))
        return DaliBatches(store, config, EngineParts(t, targets, bad, finisher))
    if config.engine is Engine.GPU:
        from .cuda_finisher import CudaFinisher
        from .gpu_decode import GpuDecodeBatches
        from .gpu_region import crop_streams
        finisher = CudaFinisher(output, t, targets, Filled(normalized=False, samples_applied=False))
        return GpuDecodeBatches(store, config, EngineParts(t, targets, bad, finisher), crop_streams(store, output))
    if decoder is None:
        raise ValueError("the thread engine needs its Decoder (feedline.selection.resolve_engine_and_decoder)")
    if config.engine is Engine.PROCESSES:
        from .processes import ProcessBatches
        from .shared_ring import writes_normalized
        if output.on_cuda:
            from .cuda_finisher import CudaFinisher
            finisher = CudaFinisher(output, t, targets, Filled(normalized=False, samples_applied=True))
        else:
            finisher = HostFinisher(output, t, targets, Filled(normalized=writes_normalized(output),
                                                               samples_applied=True))
        return ProcessBatches(store, config, decoder, EngineParts(t, targets, bad, finisher))
    from .threads import ThreadBatches
    if output.on_cuda:
        from .cuda_finisher import CudaFinisher
        finisher = CudaFinisher(output, t, targets, Filled(normalized=False, samples_applied=True))
    else:
        finisher = HostFinisher(output, t, targets, Filled(normalized=True, samples_applied=True))
    return ThreadBatches(store, config, decoder, EngineParts(t, targets, bad, finisher))


__all__ = ["BatchSource", "engine_type", "make_source"]
