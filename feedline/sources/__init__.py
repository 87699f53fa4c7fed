"""Batch sources: what turns an epoch's sample plans into finished batches.

Which source (engine=) and which decoder are chosen in feedline.decoders.selection; make_source
builds the chosen engine and, once, each part it is handed, with only what that part
needs: the sample path's setup (SampleSpec: reader, decoder, per-sample transforms), the
ring's shape (RingSpec), the output (OutputSpec, for the rows and the Finisher), the
transforms, the targets, the bad-record rule and the Finisher. LoaderConfig stops here.
Every source implements the same small protocol, so FeedLoader never asks which one it
holds. Sources differ in speed, never in data: the same (seed, epoch, index) gives the same
crop, flip and label from each, and a bad record is reported in the same ledger with the
same substitute.

- CpuBatches (cpu_engine.py): the one sample path (fill.py) run by worker processes, each
  with its own GIL (the default), or by threads of this process (``num_workers=0``).
- DaliBatches (dali.py): one NVIDIA DALI pipeline (nvJPEG on a GPU, CPU operators without).
- GpuDecodeBatches (gpu_decode.py): nvImageCodec decoding the crops on the GPU.
"""
from __future__ import annotations

from typing import Iterator, Protocol

import torch

from ..core.choices import Engine
from ..core.config import LoaderConfig
from ..decoders.base import Decoder
from ..planning.plan import EpochPlan
from ..core.stats import LoaderStats
from .fill import SampleSpec
from .finisher import Filled, HostFinisher
from .policy import BadRecords
from .ring import ArenaRing, RingSpec, writes_normalized
from .target_batches import mask_spec, target_spec
from .transforming import transforming


class BatchSource(Protocol):
    """Turns the batch plans of one epoch into (images, labels) batches."""

    def run(self, epoch: EpochPlan, start: int, stats: LoaderStats) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The batches of ``epoch`` from batch number ``start`` on, in order. Bad records go
        into ``stats.ledger`` (and are raised or substituted as the config says); stage
        times into ``stats``. Closing the iterator stops the work it started."""

    def close(self) -> None:
        """Release threads, processes, pipelines and buffers. The source is not used afterwards."""


def make_source(store, config: LoaderConfig, decoder: Decoder | None = None) -> BatchSource:
    """The source for ``config.engine`` (already resolved: never "auto"), with its parts
    built once. ``decoder``: the CPU engine's Decoder, chosen by feedline.decoders.selection. A
    MemoryError first when its buffers cannot fit (at the largest size of a schedule)."""
    c, output = config, config.output
    t = transforming(store, c.transforms, c.seed, output.on_cuda, c.augment.ignore_index)
    targets = target_spec(store, c.batch_size, c.augment.min_box_visibility)
    masks = mask_spec(store, output.mask_dtype, c.augment.ignore_index)
    bad = BadRecords(store, c.on_error)
    if c.engine is Engine.DALI and masks is not None:
        raise ValueError(f"{store.filename} has masks, which the DALI pipeline does not make: pass "
                         "engine='processes' (the CPU workers) or engine='gpu' (nvImageCodec)")
    on_cpu = c.engine in (Engine.PROCESSES, Engine.THREADS)   # the engines whose ring of Slots is on the host
    ring = RingSpec(c.prefetch, c.batch_size, output, pin=on_cpu and (output.on_cuda or c.pin_memory),
                    masks=masks is not None)
    ring.check_fits(c.largest_size(), host_ring=on_cpu)   # before anything is allocated
    if c.engine is Engine.DALI:
        from .dali import DaliBatches
        from .dali_graph import PipelineSpec
        # DALI normalizes in its pipeline, unless transforms follow it: then it gives pixels
        finisher = HostFinisher(output, t, targets, Filled(normalized=t is None, samples_applied=False))
        pipeline = PipelineSpec(c.batch_size, c.num_workers, c.prefetch, output, c.augment.size, c.region_decode)
        return DaliBatches(store, pipeline, t is not None, targets, bad, finisher)
    if c.engine is Engine.GPU:
        from .cuda_finisher import CudaFinisher
        from .gpu_decode import GpuDecodeBatches
        from .gpu_region import crop_streams
        finisher = CudaFinisher(output, t, targets, Filled(normalized=False, samples_applied=False))
        return GpuDecodeBatches(store, c.num_workers, c.prefetch, targets, bad, finisher,
                                crop_streams(store, output, c.region_decode), masks)
    if decoder is None:
        raise ValueError("the CPU engine needs its Decoder (feedline.decoders.selection.resolve_engine_and_decoder)")
    from .cpu_engine import CpuBatches
    sample = SampleSpec(store, decoder, t.host if t is not None and t.per_sample else None, c.seed, bad.substitutes,
                        masks)
    if c.engine is Engine.PROCESSES:
        from .process_workers import ProcessWorkers
        workers = ProcessWorkers(sample, c.num_workers, c.decoder)
    else:
        from .thread_workers import ThreadWorkers
        workers = ThreadWorkers(sample, c.num_workers)
    memory = ArenaRing(ring, c.augment.size, workers, targets)
    if output.on_cuda:
        from .cuda_finisher import CudaFinisher
        finisher = CudaFinisher(output, t, targets, Filled(normalized=False, samples_applied=True))
    else:
        finisher = HostFinisher(output, t, targets, Filled(normalized=writes_normalized(output), samples_applied=True))
    return CpuBatches(store, workers, memory, finisher, targets, bad, c.timeout)


__all__ = ["BatchSource", "make_source"]
