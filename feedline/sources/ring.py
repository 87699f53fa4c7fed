"""The ring of Slots the thread engine fills: ``prefetch + 2`` of them, each made whole
with its memory (slot.py), so memory stays constant however long the run.

Two kinds of memory, by where the batch is finished:
- for a CUDA Finisher: pinned uint8 N x H x W x 3 pixels and int64 labels, reused once
  the host-to-device copy that reads them has finished (the Finisher says when);
- on the host: the tensors the consumer receives (host_output.py says what happens to a
  batch it keeps): a slot whose tensors are still held elsewhere is made anew.
The targets beyond the label live in the slot beside the images, pinned where they are.
"""
from __future__ import annotations

import functools
from typing import Callable

import torch

from ..config import OutputSpec
from .host_output import host_images, memory_users
from .normalization import HostNormalizer
from .slot import Slot
from .target_batches import TargetSpec


def ring_slots(prefetch: int) -> int:
    """The Slots of the thread engine's ring: the ``prefetch`` batches filled ahead and two
    more, the batch the consumer holds and the one before it (host_output.py)."""
    return prefetch + 2


class Ring:
    """Makes the Slot of each ring position; ``reuse_held=False`` makes a position's Slot
    anew whenever anything besides the ring holds one of its tensors."""

    def __init__(self, slots: int, size: tuple[int, int], make: Callable[[int], Slot], reuse_held: bool):
        self.slots, self.size = slots, tuple(size)
        self.fresh = 0                     # slots made anew because the old tensors were held
        self._make, self._reuse_held = make, reuse_held
        self._made: list[Slot | None] = [None] * slots
        self._alone: list[list[int | None]] = [[] for _ in range(slots)]   # users of each tensor, ring alone

    def slot(self, number: int) -> Slot:
        """Slot ``number``, ready to be planned into."""
        slot = self._made[number]
        if slot is None or (not self._reuse_held and self._held(number)):
            self.fresh += slot is not None
            slot = self._made[number] = self._make(number)
            self._alone[number] = [memory_users(t) for t in slot.tensors()]
        return slot

    def _held(self, number: int) -> bool:
        """Whether anything besides the ring holds a tensor of the slot (True when PyTorch cannot tell)."""
        now = [memory_users(t) for t in self._made[number].tensors()]
        return any(u is None or a is None or u > a for u, a in zip(now, self._alone[number], strict=True))


def staging_slot(number: int, batch_size: int, size: tuple[int, int], targets: TargetSpec | None,
                 pin: bool = True) -> Slot:
    """A Slot of uint8 pixels for a CUDA Finisher to copy, pinned."""
    images = torch.empty((batch_size, *size, 3), dtype=torch.uint8, pin_memory=pin)
    labels = torch.empty(batch_size, dtype=torch.int64, pin_memory=pin)
    return Slot(number, images, labels, targets.allocate(pin) if targets else None, size)


def output_slot(number: int, batch_size: int, size: tuple[int, int], output: OutputSpec,
                targets: TargetSpec | None, pin: bool = False) -> Slot:
    """A Slot of the host batch the consumer receives, in the output's dtype and layout."""
    images = host_images((batch_size, 3, *size), output, HostNormalizer(output).dtype, pin)
    labels = torch.empty(batch_size, dtype=torch.int64, pin_memory=pin)
    return Slot(number, images, labels, targets.allocate(pin) if targets else None, size)


def staging_ring(slots: int, batch_size: int, size: tuple[int, int], targets: TargetSpec | None,
                 pin: bool = True) -> Ring:
    """Staging Slots, reused as they are: the consumer gets copies."""
    return Ring(slots, size, functools.partial(staging_slot, batch_size=batch_size, size=tuple(size),
                                               targets=targets, pin=pin), reuse_held=True)


def output_ring(slots: int, batch_size: int, size: tuple[int, int], output: OutputSpec,
                targets: TargetSpec | None, pin: bool = False) -> Ring:
    """Host output Slots, made anew where the consumer still holds the old ones."""
    return Ring(slots, size, functools.partial(output_slot, batch_size=batch_size, size=tuple(size),
                                               output=output, targets=targets, pin=pin), reuse_held=False)
