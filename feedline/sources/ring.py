"""The ring of batch buffers the decode threads write into, one batch per slot, for the
CUDA prefetcher: uint8 N x H x W x 3 images and int64 labels, pinned.

Allocated once, so memory stays constant however long the run. A slot goes back to the
decode threads only once its host-to-device copy has finished (the prefetcher says when).
"""
from __future__ import annotations

import numpy as np
import torch


class StagingTarget:
    """Slot ``slot`` of a StagingRing as the decode threads see it: they decode into it (and
    run the host part of the per-sample transforms there, ``drawn``, set by the Feed)."""

    drawn = None

    def __init__(self, images: np.ndarray, labels: np.ndarray):
        self._images = images
        self.labels = labels

    def decode_buffer(self, j: int) -> np.ndarray:
        return self._images[j]

    def write(self, j: int, decoded: np.ndarray) -> None:
        """The sample was decoded in place; the GPU normalizes the batch."""
        if self.drawn is not None:
            out = self.drawn.apply(j, decoded)
            if out is not decoded:
                np.copyto(decoded, out)


class StagingRing:
    def __init__(self, slots: int, batch_size: int, size: tuple[int, int], pin: bool = True):
        h, w = size
        self.images = torch.empty((slots, batch_size, h, w, 3), dtype=torch.uint8, pin_memory=pin)
        self.labels = torch.empty((slots, batch_size), dtype=torch.int64, pin_memory=pin)
        # numpy views of the same memory, for the decoders (no copies, no per-sample tensors).
        self.images_np = self.images.numpy()
        self.labels_np = self.labels.numpy()
        self.slots, self.size = slots, (h, w)

    def target(self, slot: int) -> StagingTarget:
        return StagingTarget(self.images_np[slot], self.labels_np[slot])
