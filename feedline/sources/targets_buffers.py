"""A batch's targets beyond one label, collate-free: arrays of `TargetColumns.batch_layout`
that live in the ring's slots beside the images (pinned where the images are), written by
the planner (every row, from the plan's records, crops and flips) and by a decode thread for
a substituted row (the substitute's own targets and crop), and handed over with the images
(target_batches.py).
"""
from __future__ import annotations

from .host_output import memory_users
from .target_batches import TargetSpec


class SlotTargets:
    """One slot's target tensors, their numpy views, and their users while only the ring holds them."""

    def __init__(self, spec: TargetSpec, pin: bool):
        self.tensors = spec.allocate(pin)
        self.arrays = {name: t.numpy() for name, t in self.tensors.items()}
        self._alone = [memory_users(t) for t in self.tensors.values()]

    def held(self) -> bool:
        """Whether anything besides the ring holds a tensor (True when PyTorch cannot tell)."""
        now = [memory_users(t) for t in self.tensors.values()]
        return any(u is None or u > a for u, a in zip(now, self._alone, strict=True))


class TargetedRing:
    """A ring (host_output.OutputRing or ring.StagingRing) whose slots carry target buffers.

    ``check_held``: on the host, a slot's target tensors are what the consumer receives, so a
    slot whose tensors are still held gets fresh ones (as the images do); for the CUDA
    prefetcher the consumer gets device copies and the slot is reused once copied."""

    def __init__(self, ring, spec: TargetSpec, pin: bool, check_held: bool):
        self._ring, self.spec, self._pin, self._check_held = ring, spec, pin, check_held
        self.slots = ring.slots
        self._buffers: list[SlotTargets | None] = [None] * ring.slots

    def target(self, slot: int):
        target = self._ring.target(slot)
        buffers = self._buffers[slot]
        if buffers is None or (self._check_held and buffers.held()):
            buffers = self._buffers[slot] = SlotTargets(self.spec, self._pin)
        # the ring's size is its epoch's output size: the boxes' pixels
        target.targets, target.target_spec, target.target_size = buffers, self.spec, self._ring.size
        return target

    def __getattr__(self, name):   # the ring's own images and labels, for the prefetcher
        return getattr(self._ring, name)
