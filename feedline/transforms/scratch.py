"""Batch-sized temporaries kept between batches.

On the CPU a fresh tensor of a batch's size (tens of MB) comes from the system and goes back
to it when freed, so every batch pays its page faults again: more time than the arithmetic
done in it. A Scratch keeps one tensor per thread and hands it out again while the shape,
dtype and strides match. On a device the caching allocator already reuses memory (ordered by
stream), so a new tensor is handed out there.
"""
from __future__ import annotations

import threading

import torch


class Scratch:
    """One reusable, uninitialized tensor per thread; its content is the caller's until its
    next call on that thread."""

    def __init__(self):
        self._local = threading.local()

    def like(self, x: torch.Tensor) -> torch.Tensor:
        """A tensor with ``x``'s shape, dtype, device and strides."""
        if x.device.type != "cpu":
            return torch.empty_like(x)
        return self._kept(lambda t: t.shape == x.shape and t.dtype == x.dtype and t.stride() == x.stride(),
                          lambda: torch.empty_like(x))

    def empty(self, shape: tuple, dtype: torch.dtype, device) -> torch.Tensor:
        """A contiguous tensor."""
        if torch.device(device).type != "cpu":
            return torch.empty(shape, dtype=dtype, device=device)
        return self._kept(lambda t: t.shape == shape and t.dtype == dtype and t.is_contiguous(),
                          lambda: torch.empty(shape, dtype=dtype))

    def _kept(self, fits, make) -> torch.Tensor:
        kept = getattr(self._local, "tensor", None)
        if kept is None or not fits(kept):
            self._local.tensor = None   # the previous one is let go first: one per thread at most
            kept = self._local.tensor = make()
        return kept

    def __reduce__(self):   # copied or sent to another process: a new, empty one
        return (Scratch, ())
