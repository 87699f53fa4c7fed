"""A fixed ring of batch buffers: uint8 N x H x W x 3 images and int64 labels per slot.

Allocated once, pinned when batches go to a CUDA device, so memory stays constant
however long the run. Decode threads write samples straight into a slot.
"""
from __future__ import annotations

import torch


class BatchRing:
    def __init__(self, slots: int, batch_size: int, size: tuple[int, int], pin: bool):
        h, w = size
        self.images = torch.empty((slots, batch_size, h, w, 3), dtype=torch.uint8, pin_memory=pin)
        self.labels = torch.empty((slots, batch_size), dtype=torch.int64, pin_memory=pin)
        # numpy views of the same memory, for the decoders (no copies, no per-sample tensors).
        self.images_np = self.images.numpy()
        self.labels_np = self.labels.numpy()
        self.slots = slots
