"""The worker engine's ring: its Slots live in shared-memory arenas that every worker maps.

What an arena's rows hold depends on where the batch is finished: the host batch the
consumer receives, written normalized by the workers (``writes_normalized``), or uint8
pixels for the Finisher to normalize; for a CUDA Finisher those pixels are pinned in place
(host_pinning.py), so its host-to-device copy is asynchronous.
"""
from __future__ import annotations

import itertools

import numpy as np
import torch

from ..config import LoaderConfig, OutputSpec
from .host_pinning import HostPinning
from .normalization import normalize_table
from .ring import Ring, ring_slots
from .shared_rows import Arena, RowFormat
from .slot import Slot
from .target_batches import TargetSpec
from .worker_pool import WorkerPool

# Output dtypes a worker writes normalized (numpy has them); others get uint8 pixels,
# normalized per batch by the Finisher.
_NUMPY_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.uint8: "uint8"}


def writes_normalized(output: OutputSpec) -> bool:
    """Whether the workers write the batch the host consumer receives (else uint8 pixels)."""
    return not output.on_cuda and output.dtype in _NUMPY_DTYPES


def row_format(config: LoaderConfig, size: tuple[int, int]) -> RowFormat:
    output = config.output
    if not writes_normalized(output):
        return RowFormat(config.batch_size, tuple(size))
    table = normalize_table(output.mean, output.std) if output.mean is not None else None
    return RowFormat(config.batch_size, tuple(size), _NUMPY_DTYPES[output.dtype], output.channels_last, table)


class SharedRing:
    """The ring's Slots, each in an arena of its own that every worker maps. A Slot made
    anew (its old tensors still held by the consumer, or a new size) gets a new arena; the
    workers forget the old one, whose memory goes when the consumer lets go of it. For a
    CUDA Finisher (``pinning``) each arena is pinned in place, its labels and targets in
    pinned memory, as the thread engine's staging Slots are."""

    def __init__(self, pool: WorkerPool, config: LoaderConfig, targets: TargetSpec | None, size,
                 pinning: HostPinning | None = None):
        self.pool, self.config, self.targets, self.pinning = pool, config, targets, pinning
        self.format = row_format(config, size)
        self.arena_of: dict[int, int] = {}       # ring position -> arena number
        self._numbers = itertools.count()
        on_cuda = config.output.on_cuda
        self.ring = Ring(ring_slots(config.prefetch), size, self._make, reuse_held=on_cuda)

    def _make(self, number: int) -> Slot:
        fmt = self.format
        arena = Arena(fmt.nbytes)
        old, self.arena_of[number] = self.arena_of.get(number), next(self._numbers)
        self.pool.give_arena(self.arena_of[number], fmt, arena)
        if old is not None:
            self.pool.drop_arena(old)
        pin = self.pinning is not None
        if pin:   # uint8 pixels for a CUDA Finisher
            flat = self.pinning.tensor(arena.memory, fmt.nbytes).view(getattr(torch, fmt.dtype))
        else:
            flat = torch.frombuffer(arena.memory, dtype=getattr(torch, fmt.dtype), count=int(np.prod(fmt.shape)))
        images = flat.view(fmt.shape)
        if not self.config.output.on_cuda and fmt.channels_last:
            images = images.permute(0, 3, 1, 2)   # N x C x H x W in channels_last memory
        labels = torch.empty(self.config.batch_size, dtype=torch.int64, pin_memory=pin)
        return Slot(number, images, labels, self.targets.allocate(pin) if self.targets else None, fmt.size)

    def drop(self) -> None:
        for arena in self.arena_of.values():
            self.pool.drop_arena(arena)
        self.arena_of.clear()
