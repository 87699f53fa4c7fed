"""Finishing batches on the host: each decode thread normalizes its own sample straight
into the batch's output tensor, so the consumer only hands the batch over."""
from __future__ import annotations

import ctypes
import functools
import threading
from typing import Iterator

import numpy as np
import torch

from ..config import OutputSpec
from ..stats import LoaderStats
from .decode_queue import DecodeQueue
from .ring import BatchRing

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


class HostFinisher:
    """Each sample is converted by the decode thread that decoded it, straight into the
    batch's output tensor: one table lookup (cv2.LUT) maps uint8 to the normalized float,
    in parallel and while the sample is still in cache. A whole-batch torch conversion
    here would cost about as much as the decoding. Every batch is a new tensor: the
    caller may keep it."""

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

    @property
    def sample_converter(self) -> "HostFinisher":
        return self

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

    def deliver(self, queue: DecodeQueue, ring: BatchRing, stats: LoaderStats) -> Iterator:
        """The decode threads already wrote each batch's output tensor: hand it over."""
        while (batch := queue.next_filled(block=True)) is not None:
            labels = ring.labels[batch.slot, :len(batch.plan)].clone()
            queue.release(batch.slot)
            yield batch.output, labels
