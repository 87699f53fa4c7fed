"""From a filled uint8 N x H x W x 3 slot to the tensor the training step consumes.

``CudaPrefetcher`` copies the pinned slot to the GPU on a side stream, converts and
normalizes it there and hands it over with an event, so the copy of batch k+1
overlaps the step on batch k. ``CpuFinisher`` does the same work on the host, per
sample, in the decode threads.
Both return N x C x H x W in channels_last memory: the NHWC buffer seen as NCHW.
"""
from __future__ import annotations

import ctypes
import functools
import threading
from dataclasses import dataclass

import numpy as np
import torch

from .plan import OutputSpec


def _normalizer(output: OutputSpec, device) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(scale, bias) with x * scale + bias == (x / 255 - mean) / std, or None for uint8 output."""
    if output.mean is None:
        return None
    mean = torch.tensor(output.mean, dtype=torch.float32, device=device).view(1, 3, 1, 1)
    std = torch.tensor(output.std, dtype=torch.float32, device=device).view(1, 3, 1, 1)
    return 1.0 / (255.0 * std), -mean / std


def convert(images_nhwc: torch.Tensor, output: OutputSpec, norm) -> torch.Tensor:
    """uint8 NHWC -> NCHW in output.dtype, normalized; a new tensor, never a view of the input."""
    x = images_nhwc.permute(0, 3, 1, 2)  # NCHW view whose memory is channels_last
    if norm is None:
        y = x.clone(memory_format=torch.channels_last if output.channels_last else torch.contiguous_format)
        return y
    scale, bias = norm
    y = torch.empty(x.shape, dtype=torch.float32, device=x.device,
                    memory_format=torch.channels_last if output.channels_last else torch.contiguous_format)
    torch.mul(x, scale, out=y)  # computed in float32, then cast: bf16 loses no more than its own rounding
    y.add_(bias)
    dtype = output.dtype or torch.float32
    return y if dtype == torch.float32 else y.to(dtype)


_MADV_HUGEPAGE = 14
_HUGE_PAGE = 2 << 20


@functools.lru_cache(maxsize=None)
def _madvise():
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):  # not Linux
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return madvise


def _advise_huge_pages(tensor: torch.Tensor) -> None:
    """Ask Linux for 2 MiB pages under a fresh batch (best effort). Each batch is new
    memory the caller keeps, and first-touch faults on 4 KiB pages cost more than the
    normalization written into them; huge pages cut that by half or more here."""
    nbytes = tensor.untyped_storage().nbytes()
    start = -(-tensor.data_ptr() // _HUGE_PAGE) * _HUGE_PAGE
    end = (tensor.data_ptr() + nbytes) // _HUGE_PAGE * _HUGE_PAGE
    if end > start and _madvise() is not None:
        _madvise()(start, end - start, _MADV_HUGEPAGE)  # a failure only means small pages


@dataclass
class Pending:
    images: torch.Tensor
    labels: torch.Tensor
    slot: int
    copied: object = None   # torch.cuda.Event: the pinned slot may be refilled after it
    ready: object = None    # torch.cuda.Event: the batch is complete on the side stream


class CpuFinisher:
    """On the host, each sample is converted by the decode thread that decoded it,
    straight into the batch's output tensor: one table lookup (cv2.LUT) maps uint8 to
    the normalized float, in parallel and while the sample is still in cache. A
    whole-batch torch conversion here would cost about as much as the decoding."""

    per_sample = True

    def __init__(self, output: OutputSpec, size: tuple[int, int]):
        self.output = output
        self.size = size
        self._dtype = output.dtype or torch.float32
        self._format = torch.channels_last if output.channels_last else torch.contiguous_format
        self._lut = None
        if output.mean is not None:
            levels = np.arange(256, dtype=np.float64)[:, None] / 255.0
            table = (levels - np.array(output.mean)) / np.array(output.std)
            self._lut = table.astype(np.float32).reshape(1, 256, 3)
        # Written straight into the output when the layout allows, else via a scratch buffer.
        self._direct = output.channels_last and self._dtype in (torch.float32, torch.uint8)
        self._scratch = threading.local()

    def new_batch(self, n: int) -> torch.Tensor:
        batch = torch.empty((n, 3, *self.size), dtype=self._dtype, memory_format=self._format)
        _advise_huge_pages(batch)
        return batch

    def convert_sample(self, sample: np.ndarray, batch: torch.Tensor, j: int) -> None:
        """Write the uint8 H x W x 3 ``sample`` into ``batch[j]``, normalized and cast."""
        import cv2
        if self._direct:
            dst = batch[j].permute(1, 2, 0).numpy()  # channels_last: H x W x C, contiguous
            if self._lut is None:
                np.copyto(dst, sample)
            elif cv2.LUT(sample, self._lut, dst=dst) is not dst:
                raise RuntimeError("cv2.LUT did not write into the batch")
            return
        if self._lut is None:
            converted = sample
        else:
            converted = getattr(self._scratch, "buffer", None)
            if converted is None or converted.shape != sample.shape:
                converted = self._scratch.buffer = np.empty(sample.shape, dtype=np.float32)
            cv2.LUT(sample, self._lut, dst=converted)
        batch[j].copy_(torch.from_numpy(converted).permute(2, 0, 1))


class CudaPrefetcher:
    """Copy and normalize on a side stream; the consumer's stream waits on an event."""

    per_sample = False

    def __init__(self, output: OutputSpec):
        self.output = output
        self.device = torch.device(output.device)
        self.stream = torch.cuda.Stream(device=self.device)
        self._norm = _normalizer(output, self.device)  # created on the device once

    def submit(self, images: torch.Tensor, labels: torch.Tensor, slot: int) -> Pending:
        # No wait on the consumer's stream: that would serialize this copy behind the step
        # it is meant to overlap. Memory the consumer still uses is guarded by
        # record_stream in finish(), the pinned slot by the `copied` event.
        with torch.cuda.stream(self.stream):
            images_gpu = images.to(self.device, non_blocking=True)
            labels_gpu = labels.to(self.device, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self.stream)
            out = convert(images_gpu, self.output, self._norm)
            ready = torch.cuda.Event()
            ready.record(self.stream)
        return Pending(out, labels_gpu, slot, copied, ready)

    def copied(self, pending: Pending) -> bool:
        return pending.copied.query()

    def wait_copied(self, pending: Pending) -> None:
        pending.copied.synchronize()

    def finish(self, pending: Pending):
        current = torch.cuda.current_stream(self.device)
        current.wait_event(pending.ready)
        # Made on the side stream, used on the consumer's: keep the allocator from
        # reusing the memory before the consumer's work on it is done.
        pending.images.record_stream(current)
        pending.labels.record_stream(current)
        return pending.images, pending.labels


def make_finisher(output: OutputSpec, size: tuple[int, int]):
    return CudaPrefetcher(output) if str(output.device).startswith("cuda") else CpuFinisher(output, size)
