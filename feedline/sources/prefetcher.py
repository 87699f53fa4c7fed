"""The CUDA-stream prefetcher: from a filled, pinned uint8 N x H x W x 3 slot to the tensor
the training step consumes, while the previous step computes.

A side stream copies the slot to the GPU, converts and normalizes it there, and hands
it over with an event, so the copy of batch k+1 overlaps the step on batch k. The result
is N x C x H x W in channels_last memory: the NHWC buffer seen as NCHW.

Three synchronizations make it correct, each guarding one hazard:
- ``ready``: the consumer's stream waits on it before using the batch (the copy and
  normalization of the side stream must be done);
- ``record_stream``: the batch was allocated on the side stream but is used on the
  consumer's, so the allocator must not hand its memory out again before the consumer's
  work on it is done;
- ``copied``: the pinned slot is given back to the decode threads only once the
  host-to-device copy that reads it has finished.
"""
from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Iterator

import torch

from ..config import OutputSpec
from ..stats import LoaderStats
from .feed import Feed
from .normalization import normalize_batch
from .ring import StagingRing
from .target_batches import batch_targets, each_tensor, to_device


@dataclass
class Pending:
    images: torch.Tensor
    labels: torch.Tensor | dict   # or the targets (targets_buffers.py)
    slot: int
    copied: torch.cuda.Event   # the pinned slot may be refilled after it
    ready: torch.cuda.Event    # the batch is complete on the side stream


class CudaPrefetcher:
    """Copy and normalize on a side stream; the consumer's stream waits on an event."""

    def __init__(self, output: OutputSpec, transforming=None):
        self.output = output
        self.transforming = transforming   # transforming.Transforming: its device part and batch part run here
        self.device = torch.device(output.device)
        self.stream = torch.cuda.Stream(device=self.device)

    def submit(self, images: torch.Tensor, labels: torch.Tensor, slot: int, plan=None) -> Pending:
        # No wait on the consumer's stream: that would serialize this copy behind the step
        # it is meant to overlap. Memory the consumer still uses is guarded by
        # record_stream in finish(), the pinned slot by the `copied` event.
        with torch.cuda.stream(self.stream):
            images_gpu = images.to(self.device, non_blocking=True)
            labels_gpu = to_device(labels, self.device)   # the int64 labels, or the targets' tensors
            copied = torch.cuda.Event()
            copied.record(self.stream)
            pixels = images_gpu.permute(0, 3, 1, 2)  # NHWC memory seen as NCHW
            t = self.transforming
            if t is not None:  # built-ins batched on uint8 before normalizing (same parameters as the host's)
                pixels = t.on_device(pixels, plan)
            out = normalize_batch(pixels, self.output)
            if t is not None:
                out, labels_gpu = t.on_batch(out, labels_gpu, plan)
            ready = torch.cuda.Event()
            ready.record(self.stream)
        return Pending(out, labels_gpu, slot, copied, ready)

    def finish(self, pending: Pending) -> tuple[torch.Tensor, torch.Tensor]:
        current = torch.cuda.current_stream(self.device)
        current.wait_event(pending.ready)
        pending.images.record_stream(current)
        for t in each_tensor(pending.labels):
            t.record_stream(current)
        return pending.images, pending.labels

    def deliver(self, queue: Feed, ring: StagingRing, stats: LoaderStats) -> Iterator:
        """Batch k+1 is copied and normalized on the side stream while step k runs."""
        inflight = collections.deque()   # submitted, not yet handed out
        copying = collections.deque()    # slots whose host-to-device copy may still run

        def submit(batch) -> None:
            n = len(batch.plan)
            t0 = time.perf_counter()
            targets = batch_targets(batch.target, ring.labels[batch.slot, :n], n)
            pending = self.submit(ring.images[batch.slot, :n], targets, batch.slot, batch.plan)
            stats.add(copy_s=time.perf_counter() - t0)  # enqueue time: the copy itself is asynchronous
            copying.append(pending)
            inflight.append(pending)

        def release_copied(wait: bool) -> None:
            while copying and (wait or copying[0].copied.query()):
                copying[0].copied.synchronize()
                queue.release(copying.popleft().slot)

        try:
            while True:
                release_copied(wait=False)
                if not inflight:
                    release_copied(wait=True)  # workers need free slots to make progress
                    batch = queue.next_filled(block=True)
                    if batch is None:
                        return
                    submit(batch)
                ahead = queue.next_filled(block=False)  # overlap the next copy with this step
                if ahead is not None:
                    submit(ahead)
                yield self.finish(inflight.popleft())
        finally:
            release_copied(wait=True)  # no copy may still read a slot the workers refill
