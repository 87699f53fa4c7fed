"""Batches that stay on the host: the decode threads write each sample, normalized, straight
into the tensors the consumer receives, and nothing copies a finished batch.

The tensors come from a ring of ``prefetch + 2`` slots and are reused, so a steady run
allocates nothing and touches no fresh memory. The consumer may keep a batch as long as it
likes: a slot is written again only when nobody else holds its tensors (no view of them,
no numpy array over them, no tensor sharing their memory is alive; PyTorch counts the
users of a tensor's memory). A slot whose old tensors are still held gets fresh ones, and
the kept tensors belong to the consumer alone. Memory is the ring's slots plus what the
consumer keeps, as with any DataLoader. (A bare ``x.untyped_storage()`` kept without any
tensor is not counted: keep a tensor.) The batch the consumer holds and the one before it
are lent; the other ``prefetch`` slots are being filled meanwhile.
"""
from __future__ import annotations

import collections
import ctypes
import functools
import mmap
import threading
from typing import Iterator

import numpy as np
import torch

from ..config import OutputSpec
from .normalization import HostNormalizer, layout_of
from .target_batches import batch_targets

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


def advise_huge_pages(tensor: torch.Tensor) -> None:
    """Ask Linux for 2 MiB pages under fresh batch memory (best effort): first-touch faults
    on 4 KiB pages would otherwise cost more than the normalization written into them."""
    nbytes = tensor.untyped_storage().nbytes()
    start = -(-tensor.data_ptr() // _HUGE_PAGE) * _HUGE_PAGE
    end = (tensor.data_ptr() + nbytes) // _HUGE_PAGE * _HUGE_PAGE
    if end > start and _madvise() is not None:
        _madvise()(start, end - start, _MADV_HUGEPAGE)  # a failure only means small pages


def memory_users(tensor: torch.Tensor) -> int | None:
    """How many tensors (and storages) share ``tensor``'s memory; None where PyTorch does not say."""
    count = getattr(torch._C, "_storage_Use_Count", None)
    return None if count is None else count(tensor.untyped_storage()._cdata)


def mapped_batch(shape: tuple[int, ...], dtype: torch.dtype, channels_last: bool) -> torch.Tensor:
    """An N x C x H x W tensor in memory of its own: an anonymous mapping, starting on a huge
    page and advised to use them, unmapped when the last tensor over it goes. Not malloc's:
    a heap would mix batches with other data (and keep freed batches' pages and advice)."""
    n, c, h, w = shape
    nbytes = n * c * h * w * dtype.itemsize
    memory = mmap.mmap(-1, nbytes + _HUGE_PAGE)
    anchor = ctypes.c_char.from_buffer(memory)
    start = (-ctypes.addressof(anchor)) % _HUGE_PAGE
    del anchor  # a live export would pin the mapping's size; the tensor holds the mapping itself
    flat = torch.frombuffer(memory, dtype=torch.uint8, count=nbytes, offset=start).view(dtype)
    batch = flat.view(n, h, w, c).permute(0, 3, 1, 2) if channels_last else flat.view(n, c, h, w)
    advise_huge_pages(batch)
    return batch


class HostBuffers:
    """One slot's tensors, and how many users their memory has while only the ring holds them."""

    def __init__(self, shape: tuple[int, ...], output: OutputSpec, dtype: torch.dtype, pin: bool):
        if pin:
            self.images = torch.empty(shape, dtype=dtype, memory_format=layout_of(output), pin_memory=True)
        else:
            self.images = mapped_batch(shape, dtype, output.channels_last)
        self.labels = torch.empty(shape[0], dtype=torch.int64, pin_memory=pin)
        self.labels_np = self.labels.numpy()
        self._alone = (memory_users(self.images), memory_users(self.labels))

    def held(self) -> bool:
        """Whether anything besides the ring holds these tensors (True when it cannot tell)."""
        now = (memory_users(self.images), memory_users(self.labels))
        return None in now or now[0] > self._alone[0] or now[1] > self._alone[1]


class HostTarget:
    """A slot as the decode threads see it: where sample j is decoded, and its row. With
    per-sample transforms (``drawn``, set by the Feed) a sample is decoded into scratch,
    transformed there as uint8, then normalized into its row."""

    drawn = None

    def __init__(self, buffers: HostBuffers, ring: "OutputRing"):
        self.images, self.labels = buffers.images, buffers.labels_np
        self.labels_tensor = buffers.labels
        self._ring = ring

    def decode_buffer(self, j: int) -> np.ndarray:
        """uint8 H x W x 3: the row itself when the output is its pixels, else this thread's scratch."""
        normalizer = self._ring.normalizer
        if normalizer.in_place and self.drawn is None:
            return normalizer.row_pixels(self.images[j])
        local = self._ring.scratch
        if getattr(local, "pixels", None) is None:
            local.pixels = np.empty((*self.images.shape[2:], 3), dtype=np.uint8)
        return local.pixels

    def write(self, j: int, decoded: np.ndarray) -> None:
        if self.drawn is not None:
            decoded = self.drawn.apply(j, decoded)
        elif self._ring.normalizer.in_place:
            return
        self._ring.normalizer(decoded, self.images[j])


class OutputRing:
    """The host batches the consumer receives (see the module docstring for their reuse)."""

    def __init__(self, slots: int, batch_size: int, size: tuple[int, int], output: OutputSpec,
                 pin: bool = False):
        self.slots, self.size = slots, tuple(size)
        self.normalizer = HostNormalizer(output)
        self.scratch = threading.local()   # each decode thread's sample, while it is normalized
        self.fresh = 0                     # slots given new tensors because the old ones were held
        self._shape, self._output, self._pin = (batch_size, 3, *size), output, pin
        self._buffers: list[HostBuffers | None] = [None] * slots

    def target(self, slot: int) -> HostTarget:
        """Slot ``slot``, ready to be filled: its tensors if nobody else holds them, else new ones."""
        buffers = self._buffers[slot]
        if buffers is None or buffers.held():
            self.fresh += buffers is not None
            buffers = self._buffers[slot] = HostBuffers(self._shape, self._output, self.normalizer.dtype,
                                                        self._pin)
        return HostTarget(buffers, self)


def lend(feed, finish=None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The filled batches of ``feed`` (a Feed over an OutputRing), in order, as views of the
    ring's tensors (through ``finish(images, targets, plan)``, the batch transforms, if given).
    A slot goes back to the feed when the consumer asks for the batch after next: by then it
    has let go of it, unless it keeps it (the ring then sees that)."""
    lent = collections.deque()   # slots of the batch the consumer holds and the one before it
    while True:
        if len(lent) == 2:
            feed.release(lent.popleft())
        job = feed.next_filled(block=True)
        if job is None:
            return
        lent.append(job.slot)
        n = len(job.plan)
        images, targets = job.target.images[:n], batch_targets(job.target, job.target.labels_tensor[:n], n)
        yield (images, targets) if finish is None else finish(images, targets, job.plan)
