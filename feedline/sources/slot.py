"""The Slot: everything one batch is, in one object, from the moment it is planned until
the consumer has it. It sits at the bottom of sources/ and imports nothing else of it.

A ring (ring.py) makes each Slot whole, with its memory; the Feed plans a batch into it
(``load``); an engine fills it (workers write its rows; the consumer records a
``substitute`` they report); a Finisher (finisher.py, cuda_finisher.py) turns it into what the consumer
receives. The engines that decode whole batches (gpu, dali) make a Slot per batch, loaded.
Only this module assigns a Slot's fields (tests/test_structure.py checks it).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..planning.plan import BatchPlan


@dataclass(eq=False)
class Slot:
    """One batch. ``images`` is, by where the batch is made: uint8 N x H x W x 3 pixels on
    the host (pinned for a copy to a CUDA device), the N x C x H x W tensors a host consumer
    receives (written normalized, row by row), or N x C x H x W pixels on a device (uint8, or
    float on the 0..255 scale). ``labels``: int64 N, the label column. ``targets``: the
    store's fields beyond the label, {name: tensor} in `TargetColumns.batch_layout` (None for
    a label-only store). ``size``: the output size (H, W) its pixels and boxes are in."""

    number: int                                      # its position in the ring (a made batch: its plan's number)
    images: torch.Tensor
    labels: torch.Tensor
    targets: dict[str, torch.Tensor] | None
    size: tuple[int, int]
    plan: BatchPlan | None = None                    # the batch planned into it
    decoded: np.ndarray | None = None                # the records actually decoded: substitutes in place of bad ones
    arena: int | None = None                         # the CPU engine's: the arena, by number, its rows are written into
    # numpy views of the host memory the consumer writes (labels, targets): no copies
    label_rows: np.ndarray | None = field(init=False, default=None)
    target_rows: dict[str, np.ndarray] | None = field(init=False, default=None)

    def __post_init__(self):
        self.size = tuple(self.size)
        if self.labels.device.type == "cpu":
            self.label_rows = self.labels.numpy()
        if self.targets is not None and all(t.device.type == "cpu" for t in self.targets.values()):
            self.target_rows = {name: t.numpy() for name, t in self.targets.items()}

    def load(self, plan: BatchPlan) -> None:
        """``plan`` is planned into this slot: its labels written."""
        self.plan = plan
        self.decoded = np.array(plan.indices, dtype=np.int64)
        self.label_rows[:len(plan)] = plan.labels

    def substitute(self, j: int, index: int, label: int) -> None:
        """Row ``j`` holds record ``index`` (standing in for a bad record) and its label."""
        self.decoded[j] = index
        self.label_rows[j] = label

    def __len__(self) -> int:
        """The samples of the batch planned into it."""
        return len(self.plan)

    def tensors(self) -> list[torch.Tensor]:
        """Its memory: the images, the labels and the targets' tensors."""
        return [self.images, self.labels, *(self.targets or {}).values()]


def made_slot(plan: BatchPlan, images: torch.Tensor, labels: torch.Tensor, targets, decoded: np.ndarray) -> Slot:
    """The Slot of an engine that makes a whole batch at once (gpu, dali): loaded and filled."""
    return Slot(plan.number, images, labels, targets, tuple(images.shape[-2:]), plan=plan,
                decoded=np.asarray(decoded, dtype=np.int64))
