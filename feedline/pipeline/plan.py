"""What one batch is, decided before any decoding: the contract between the loader
(which plans batches) and the pipelines that fill them (decode threads or DALI)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..augment import AugmentSpec, plan as plan_augment
from ..order import batch_count, epoch_order, shard

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class BatchPlan:
    epoch: int
    number: int          # position of the batch in this rank's epoch
    indices: np.ndarray  # int64 (n,) record indices
    boxes: np.ndarray    # int64 (n, 4) crop in source pixels: top, left, height, width
    flips: np.ndarray    # bool (n,)
    labels: np.ndarray   # int64 (n,)

    def __len__(self) -> int:
        return len(self.indices)


@dataclass(frozen=True)
class EpochPlan:
    """Everything needed to plan the batches of one epoch on one rank."""

    spec: AugmentSpec
    seed: int
    epoch: int
    shuffle: bool
    batch_size: int
    drop_last: bool
    rank: int = 0
    world_size: int = 1

    def samples(self, n: int) -> np.ndarray:
        return shard(epoch_order(n, self.seed, self.epoch, self.shuffle), self.rank, self.world_size)

    def batches(self, labels: np.ndarray, sizes: np.ndarray, start: int = 0):
        """Yield the BatchPlans of this epoch from batch number ``start`` on."""
        samples = self.samples(len(labels))
        for number in range(start, batch_count(len(samples), self.batch_size, self.drop_last)):
            idx = samples[number * self.batch_size:(number + 1) * self.batch_size]
            hw = sizes[idx]
            boxes, flips = plan_augment(self.spec, self.seed, self.epoch, idx, hw[:, 0], hw[:, 1])
            yield BatchPlan(self.epoch, number, idx, boxes, flips, labels[idx])


@dataclass(frozen=True)
class OutputSpec:
    """What the consumer receives: N x C x H x W, normalized (or uint8 when mean is None)."""

    mean: tuple[float, float, float] | None = IMAGENET_MEAN  # on the 0..1 scale, as torchvision
    std: tuple[float, float, float] | None = IMAGENET_STD
    dtype: object = None          # torch.dtype; float32 when None (uint8 when mean is None)
    channels_last: bool = True
    device: str = "cpu"
