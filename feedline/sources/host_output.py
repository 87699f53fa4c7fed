"""Batches that stay on the host: the decode threads write each sample, normalized, straight
into the tensors the consumer receives, and nothing copies a finished batch.

The tensors come from a ring of ``prefetch + 2`` slots (ring.py) and are reused, so a steady run
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

import ctypes
import functools
import mmap

import torch

from ..config import OutputSpec
from .normalization import layout_of

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


def host_images(shape: tuple[int, ...], output: OutputSpec, dtype: torch.dtype, pin: bool) -> torch.Tensor:
    """A slot's N x C x H x W batch tensor: pinned when asked, else in a mapping of its own."""
    if pin:
        return torch.empty(shape, dtype=dtype, memory_format=layout_of(output), pin_memory=True)
    return mapped_batch(shape, dtype, output.channels_last)
