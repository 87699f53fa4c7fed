"""The CUDA Finisher: from a filled Slot to the tensor the training step consumes, on a
side stream, while the previous step computes.

A Slot of uint8 N x H x W x 3 pinned pixels is copied to the GPU (its memory seen as
N x C x H x W channels_last), finished there (finisher.finish_batch: the batched
built-ins, normalization, the batch transforms), and handed over with an event, so the
work on batch k+1 overlaps the step on batch k. A Slot already on the device (the GPU
engine's) is finished the same way, without the copy.

Three synchronizations make it correct, each guarding one hazard:
- ``ready``: the consumer's stream waits on it before using the batch (the copy and
  normalization of the side stream must be done);
- ``record_stream``: the batch was allocated on the side stream but is used on the
  consumer's, so the allocator must not hand its memory out again before the consumer's
  work on it is done;
- ``copied``: the pinned Slot is given back to be refilled only once the host-to-device
  copy that reads it has finished.
The first two are one function, ``hand_over``, which every CUDA engine calls.
"""
from __future__ import annotations

import torch

from ..core.config import OutputSpec
from .finisher import Filled, Finished, finish_batch
from .slot import Slot
from .target_batches import TargetSpec, batch_targets, each_tensor, to_device
from .transforming import Transforming


def hand_over(images: torch.Tensor, targets, ready: torch.cuda.Event, device: torch.device):
    """A batch finished on a side stream, made safe to use on the consumer's stream: the
    consumer's stream waits for ``ready``, and its memory is recorded as used there."""
    current = torch.cuda.current_stream(device)
    current.wait_event(ready)
    images.record_stream(current)
    for t in each_tensor(targets):
        t.record_stream(current)
    return images, targets


def device_batches_bytes(prefetch: int, batch_pixels: int, output: OutputSpec, mask_pixels: int = 0) -> int:
    """On a CUDA device: the batches prepared ahead and the one in use, the images in the
    output dtype and their masks (``mask_pixels`` a batch) in the masks' dtype."""
    per_batch = batch_pixels * output.dtype.itemsize + mask_pixels * output.mask_dtype.itemsize
    return (prefetch + 1) * per_batch if output.on_cuda else 0


class CudaFinisher:
    """Copy and finish on a side stream; the consumer's stream waits on an event."""

    overlaps = True   # batch k+1 is copied and finished while step k runs

    def __init__(self, output: OutputSpec, transforming: Transforming | None = None,
                 targets: TargetSpec | None = None, filled: Filled = Filled(False, True),
                 stream: torch.cuda.Stream | None = None):
        self.output, self.transforming, self.targets, self.filled = output, transforming, targets, filled
        self.device = torch.device(output.device)
        self.stream = stream if stream is not None else torch.cuda.Stream(device=self.device)

    def finish(self, slot: Slot) -> Finished:
        # No wait on the consumer's stream: that would serialize this copy behind the step
        # it is meant to overlap. Memory the consumer still uses is guarded by
        # record_stream in hand_over(), the pinned Slot by the `copied` event.
        n = len(slot)
        with torch.cuda.stream(self.stream):
            copied = None
            images = slot.images[:n]
            targets = to_device(batch_targets(self.targets, slot, n), self.device)  # the labels, or the targets
            if images.device.type == "cpu":
                images = images.to(self.device, non_blocking=True).permute(0, 3, 1, 2)  # NHWC memory seen as NCHW
                copied = torch.cuda.Event()
                copied.record(self.stream)
            images, targets = finish_batch(images, targets, slot.plan, self.transforming, self.output, self.filled)
            ready = torch.cuda.Event()
            ready.record(self.stream)
        return Finished(slot, images, targets, copied, ready)

    def hand_over(self, finished: Finished) -> tuple[torch.Tensor, object]:
        return hand_over(finished.images, finished.targets, finished.ready, self.device)

    def copied(self, finished: Finished, wait: bool) -> bool:
        """Whether the host-to-device copy that reads the Slot has finished (``wait``: once it has)."""
        if finished.copied is None:
            return True
        if wait:
            finished.copied.synchronize()
            return True
        return finished.copied.query()
