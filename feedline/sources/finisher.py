"""Finishers: from a filled Slot to the batch the consumer receives. Engines only fill
Slots; a Finisher finishes them, the same way for every engine:

    the pixels' transfer (CUDA) -> the per-sample transforms not yet applied -> the
    built-ins batched on the device -> normalization -> the batch transforms -> the
    hand-over to the consumer (on CUDA: one wait_event + record_stream, cuda_finisher.py)

What is left to do depends on what the engine filled in (``Filled``): the CPU engine's
workers apply the per-sample transforms and, for a host consumer, normalize each row
(uint8 pixels where numpy lacks the output's dtype); DALI normalizes inside its pipeline when no transforms follow it; the GPU engine
leaves float pixels on the 0..255 scale. A Finisher never drives an engine or its feed:
it receives filled Slots and says when a Slot's memory is no longer read (``copied``).

- HostFinisher: on the consumer's thread and stream (a host consumer, and DALI's
  batches, already on the output device).
- CudaFinisher (cuda_finisher.py): on a side stream of a CUDA device.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.config import OutputSpec
from .normalization import normalize_batch
from .slot import Slot
from .target_batches import TargetSpec, batch_targets, to_device
from .transforming import Transforming


@dataclass(frozen=True)
class Filled:
    """What an engine's Slots hold when they reach the Finisher."""

    normalized: bool         # the images are what the consumer receives, but for the batch transforms
    samples_applied: bool    # the per-sample transforms that run on the host were applied


@dataclass
class Finished:
    """A Slot's batch as a Finisher made it, not yet handed over."""

    slot: Slot
    images: torch.Tensor
    targets: object                  # the labels, the targets, or what a batch transform returned
    copied: object | None = None     # a CUDA event: the Slot's memory may be refilled after it
    ready: object | None = None      # a CUDA event: the batch is complete on the side stream


def finish_batch(images: torch.Tensor, targets, plan, transforming: Transforming | None, output: OutputSpec,
                 filled: Filled):
    """The batch the consumer receives from N x C x H x W ``images`` and their ``targets``, on
    their device, for what is left to do after ``filled``."""
    t = transforming
    if not filled.normalized:
        if images.is_floating_point():   # pixels on the 0..255 scale, between levels after a resize
            images = images.round_().clamp_(0, 255).to(torch.uint8) if t is not None else images.clamp_(0, 255)
        if t is None:
            return normalize_batch(images, output), targets
        if not filled.samples_applied:
            return t.finish_pixels(images, targets, plan, output)
        images = normalize_batch(t.on_device(images, plan), output)
    if t is None:
        return images, targets
    return t.on_batch(images, targets, plan)


class HostFinisher:
    """Finishes a Slot where its images are, on the consumer's thread and stream. The images
    handed over are views of the Slot's memory (the ring sees when the consumer keeps them)."""

    overlaps = False   # nothing to overlap with the consumer's step: finished when handed over

    def __init__(self, output: OutputSpec, transforming: Transforming | None, targets: TargetSpec | None,
                 filled: Filled):
        self.output, self.transforming, self.targets, self.filled = output, transforming, targets, filled
        self._device = torch.device(output.device)

    def finish(self, slot: Slot) -> Finished:
        n = len(slot)
        targets = batch_targets(self.targets, slot, n)
        if self._device.type != "cpu":
            targets = to_device(targets, self._device)
        images, targets = finish_batch(slot.images[:n], targets, slot.plan, self.transforming, self.output,
                                       self.filled)
        return Finished(slot, images, targets)

    def hand_over(self, finished: Finished) -> tuple[torch.Tensor, object]:
        return finished.images, finished.targets

    def copied(self, finished: Finished, wait: bool) -> bool:
        """Whether the Finisher is done reading the Slot's memory (always: it reads no more)."""
        return True
