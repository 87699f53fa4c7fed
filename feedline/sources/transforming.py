"""The loader's ``transforms`` and ``batch_transforms`` as every engine applies them.

Parameters are drawn once per batch from (seed, epoch, index) of each planned sample, by
whoever plans the batch (the thread engine's Feed, on the consumer's thread), so the
batches are the same for any thread count, resume point and engine. Where they run:

- thread engine, host output: every per-sample transform on the decode threads, on the
  uint8 crop before it is normalized into the batch; batch transforms on the consumer's
  thread on the finished batch;
- thread engine, CUDA output: user callables (and built-ins before them) on the decode
  threads; the trailing built-ins batched on the CUDA Finisher's side stream on uint8
  before normalizing; batch transforms after normalizing, on the side stream;
- DALI and GPU decode: their uint8 output through the same functions (``finish_pixels``),
  by their Finisher (finisher.py).

A sample's parameters belong to its planned index, also when a bad record is substituted.
"""
from __future__ import annotations

import numpy as np
import torch

from ..config import OutputSpec, TransformSpec
from ..plan import BatchPlan
from ..transforms import BatchTransforms, SampleTransforms
from ..transforms.with_targets import check_transforms_for_targets
from .normalization import normalize_batch


class DrawnSamples:
    """One batch's per-sample parameters; ``apply(j, image)`` runs them on row j (any thread)."""

    def __init__(self, transforms: SampleTransforms, seed: int, plan: BatchPlan):
        self._transforms, self._seed, self._epoch = transforms, seed, plan.epoch
        self._indices = plan.indices
        self._params = transforms.draw(seed, plan.epoch, plan.indices)

    def apply(self, j: int, image: np.ndarray) -> np.ndarray:
        return self._transforms.apply_drawn(image, self._params, j, self._seed, self._epoch,
                                            int(self._indices[j]))


class Transforming:
    """A source's transforms. ``batched_on_device``: the trailing built-ins run batched on the
    device (a CUDA output) instead of per sample on the host."""

    def __init__(self, spec: TransformSpec, seed: int, num_classes: int | None = None,
                 batched_on_device: bool = False):
        sample = SampleTransforms(spec.transforms)
        self.host, self.device = sample.split() if batched_on_device else (sample, SampleTransforms())
        self.batch = BatchTransforms(spec.batch_transforms,
                                     spec.num_classes if spec.num_classes is not None else num_classes)
        self.seed = seed

    @property
    def per_sample(self) -> bool:
        """Whether anything runs on each sample on the host."""
        return len(self.host) > 0

    def drawn(self, plan: BatchPlan) -> DrawnSamples | None:
        """The host part's parameters for ``plan`` (None when nothing runs per sample there)."""
        return DrawnSamples(self.host, self.seed, plan) if len(self.host) else None

    def on_device(self, images: torch.Tensor, plan: BatchPlan) -> torch.Tensor:
        """The device part on a uint8 N x 3 x H x W batch (any device), before normalizing."""
        if not len(self.device):
            return images
        return self.device.apply_batch(images, self.seed, plan.epoch, plan.indices)

    def on_batch(self, images: torch.Tensor, targets, plan: BatchPlan):
        """The batch transforms on the finished batch."""
        if not self.batch.steps:
            return images, targets
        # int labels on a device: their range checked on the host (plan.labels); multi-hot
        # targets have no int labels there (the column is -1 without a `label` field)
        ints = targets.get("label") if isinstance(targets, dict) else targets
        if isinstance(ints, torch.Tensor) and ints.device.type != "cpu" and not ints.is_floating_point():
            self.batch.check_labels(plan.labels)
        return self.batch.apply(images, targets, self.seed, plan.epoch, plan.indices)

    def finish_pixels(self, pixels: torch.Tensor, targets, plan: BatchPlan, output: OutputSpec):
        """For engines that decode whole batches: uint8 N x 3 x H x W pixels -> the batch the
        consumer receives (per-sample transforms, normalization, batch transforms)."""
        if len(self.host):  # per sample on the host, as the thread engine does it
            rows = pixels.permute(0, 2, 3, 1).cpu().numpy().copy()
            drawn = self.drawn(plan)
            for j in range(len(rows)):
                rows[j] = drawn.apply(j, rows[j])
            pixels = torch.from_numpy(rows).to(pixels.device).permute(0, 3, 1, 2)
        images = normalize_batch(self.on_device(pixels, plan), output)
        return self.on_batch(images, targets, plan)


def store_classes(store) -> int | None:
    """How many classes the store's labels have, when it knows (for the mixers)."""
    return len(store.classes) if store.classes else None


def transforming(store, config, batched_on_device: bool | None = None) -> Transforming | None:
    """The transforms of ``config`` for a source reading ``store``; None when there are none.
    A TransformError first when the store's boxes cannot follow one of them."""
    spec = config.transforms
    check_transforms_for_targets(store.fields, spec.transforms, spec.batch_transforms)
    if not (spec.transforms or spec.batch_transforms):
        return None
    on_device = config.output.on_cuda if batched_on_device is None else batched_on_device
    return Transforming(config.transforms, config.seed, store_classes(store), on_device)
