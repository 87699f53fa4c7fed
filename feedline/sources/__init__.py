"""Batch sources: what turns an epoch's sample plans into finished batches.

Every source implements the same small protocol, so FeedLoader never asks which one it
holds. Sources differ in speed, never in data: the same (seed, epoch, index) gives the
same crop, flip and label from each, and a bad record is reported in the same ledger
with the same substitute.

- ThreadBatches (threads.py): per-image CPU decoders on threads, a ring of pinned batch
  buffers, and a host or CUDA-stream finisher.
- DaliBatches (dali.py): one NVIDIA DALI pipeline (nvJPEG on a GPU, CPU operators without).
- GpuDecodeBatches (gpu_decode.py): nvImageCodec decoding the crops on the GPU.
"""
from __future__ import annotations

import logging
from typing import Iterator, Protocol

import torch

from ..choices import DecoderName
from ..errors import BackendUnavailable
from ..config import LoaderConfig
from ..decoders.base import Decoder
from ..plan import EpochPlan
from ..stats import LoaderStats

log = logging.getLogger(__name__)


class BatchSource(Protocol):
    """Turns the batch plans of one epoch into (images, labels) batches."""

    def run(self, epoch: EpochPlan, start: int, stats: LoaderStats) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The batches of ``epoch`` from batch number ``start`` on, in order. Bad records go
        into ``stats.ledger`` (and are raised or substituted as the config says); stage
        times into ``stats``. Closing the iterator stops the work it started."""

    def close(self) -> None:
        """Release threads, pipelines and buffers. The source is not used afterwards."""


def make_source(store, config: LoaderConfig, decoder: Decoder | None = None) -> BatchSource:
    """The source for ``config.decoder`` (already resolved: never "auto"). ``decoder``, a
    Decoder instance, is used as it is by the thread source."""
    if config.decoder is DecoderName.DALI:
        from .dali import DaliBatches
        return DaliBatches(store, config)
    if config.decoder is DecoderName.GPU:
        from .gpu_decode import GpuDecodeBatches
        return GpuDecodeBatches(store, config)
    from .threads import ThreadBatches
    return ThreadBatches(store, config, decoder or cpu_decoder(store, config.decoder))


def resolve_decoder_name(decoder, device: str) -> DecoderName:
    """The decoder a loader on ``device`` uses for ``decoder=`` (a name; "auto" resolved)."""
    name = DecoderName.parse(decoder, "decoder")
    if name is DecoderName.GPU:
        if not device.startswith("cuda"):
            raise BackendUnavailable("decoder='gpu' decodes on a CUDA device; pass device='cuda' "
                                     "(or pick a CPU decoder: decoder='auto')")
        return name
    from ..decoders import resolve_decoder
    return DecoderName(resolve_decoder(name.value, device))


def decoded_at_pack(store) -> bool:
    """Whether every record was decoded cleanly when packed (``pack --check decode``) and is
    checked against its checksum on every read: its bytes are then known to decode."""
    options = store.meta.get("pack_options") or {}
    return getattr(store, "checksums", None) is not None and options.get("check") == "decode"


def cpu_decoder(store, name: DecoderName) -> Decoder:
    """The per-image decoder ``name`` for this store. Strict (libjpeg's warnings are errors,
    so damaged data is a bad record) unless the store proves every record decodes, in which
    case the faster lenient mode decodes only the crop's region. A pure function of the
    store, so every run and every resume decodes the same way."""
    from ..decoders import get_decoder
    if decoded_at_pack(store) and name in (DecoderName.NVIMGCODEC, DecoderName.TURBOJPEG):
        log.info("%s: decoded cleanly at pack time and checksummed: decoding with %s leniently "
                 "(only the crop's region)", store.filename, name.value)
        return get_decoder(name.value, strict=False)
    return get_decoder(name.value)


__all__ = ["BatchSource", "make_source", "resolve_decoder_name"]
