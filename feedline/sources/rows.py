"""How a decode thread writes sample j of a Slot: where it decodes the sample
(``buffer``), then what it does with it (``write``): the per-sample transforms drawn for
the batch (the Slot's ``drawn``), then into the row.

- StagingRows: the row is uint8 pixels (for a CUDA Finisher): decoded in place.
- HostRows: the row is what a host consumer receives: normalized into it (normalization.py),
  or decoded straight into it when the output is its uint8 pixels in channels_last memory.
"""
from __future__ import annotations

import threading

import numpy as np

from ..config import OutputSpec
from .normalization import HostNormalizer
from .slot import Slot


class StagingRows:
    """Rows of uint8 N x H x W x 3 host pixels."""

    def buffer(self, slot: Slot, j: int) -> np.ndarray:
        return slot.image_rows[j]

    def write(self, slot: Slot, j: int, decoded: np.ndarray) -> None:
        """The sample was decoded in place; a CUDA Finisher normalizes the batch."""
        if slot.drawn is not None:
            out = slot.drawn.apply(j, decoded)
            if out is not decoded:
                np.copyto(decoded, out)


class _Scratch(threading.local):
    """Each decode thread's sample, while it is transformed and normalized."""

    def __init__(self):
        self.pixels: np.ndarray | None = None


class HostRows:
    """Rows of the N x C x H x W tensors a host consumer receives. With per-sample transforms
    a sample is decoded into scratch, transformed there as uint8, then normalized into its row."""

    def __init__(self, output: OutputSpec):
        self.normalizer = HostNormalizer(output)
        self._scratch = _Scratch()

    def buffer(self, slot: Slot, j: int) -> np.ndarray:
        """uint8 H x W x 3: the row itself when the output is its pixels, else this thread's scratch."""
        if self.normalizer.in_place and slot.drawn is None:
            return self.normalizer.row_pixels(slot.images[j])
        shape = (*slot.images.shape[2:], 3)
        if self._scratch.pixels is None or self._scratch.pixels.shape != shape:
            self._scratch.pixels = np.empty(shape, dtype=np.uint8)
        return self._scratch.pixels

    def write(self, slot: Slot, j: int, decoded: np.ndarray) -> None:
        if slot.drawn is not None:
            decoded = slot.drawn.apply(j, decoded)
        elif self.normalizer.in_place:
            return
        self.normalizer(decoded, slot.images[j])
