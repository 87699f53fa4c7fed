"""The loader's ``transforms`` and ``batch_transforms`` as every engine applies them.

Parameters are pure functions of (seed, epoch, index) of each planned sample, drawn where
the sample is made (the CPU engine's workers draw them per chunk), so the batches are the
same for any worker count, resume point and engine. Where they run:

- CPU engine, host output: every per-sample transform in the workers (fill.py), on the
  uint8 crop before it is normalized into the batch; batch transforms on the consumer's
  thread on the finished batch;
- CPU engine, CUDA output: user callables (and built-ins before them) in the workers; the
  trailing built-ins batched on the CUDA Finisher's side stream on uint8 before
  normalizing; batch transforms after normalizing, on the side stream;
- DALI and GPU decode: their uint8 output through the same functions (``finish_pixels``),
  by their Finisher (finisher.py).

A sample's parameters belong to its planned index, also when a bad record is substituted.
"""
from __future__ import annotations

import torch

from ..core.config import OutputSpec, TransformSpec
from ..fields import per_pixel
from ..planning.plan import BatchPlan
from ..transforms import BatchTransforms, SampleTransforms
from ..transforms.with_targets import check_transforms_for_targets
from .normalization import normalize_batch


class Transforming:
    """A source's transforms. ``batched_on_device``: the trailing built-ins run batched on the
    device (a CUDA output) instead of per sample on the host."""

    def __init__(self, spec: TransformSpec, seed: int, num_classes: int | None = None,
                 batched_on_device: bool = False, ignore_index: int | None = None, mask_alone: bool = False):
        """``ignore_index``: the targets hold masks (``mask_alone``: the targets are the masks),
        which every transform follows; None without masks."""
        sample = SampleTransforms(spec.transforms)
        self.host, self.device = sample.split() if batched_on_device else (sample, SampleTransforms())
        self.batch = BatchTransforms(spec.batch_transforms,
                                     spec.num_classes if spec.num_classes is not None else num_classes,
                                     ignore_index=ignore_index, mask_alone=mask_alone)
        self.seed, self.ignore_index, self.mask_alone = seed, ignore_index, mask_alone

    @property
    def per_sample(self) -> bool:
        """Whether anything runs on each sample on the host."""
        return len(self.host) > 0

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
        if len(self.host):  # per sample on the host, as the CPU engine's workers do it
            rows = pixels.permute(0, 2, 3, 1).cpu().numpy().copy()
            params = self.host.draw(self.seed, plan.epoch, plan.indices)
            for j in range(len(rows)):
                rows[j] = self.host.apply_drawn(rows[j], params, j, self.seed, plan.epoch, int(plan.indices[j]))
            pixels = torch.from_numpy(rows).to(pixels.device).permute(0, 3, 1, 2)
            if self.ignore_index is not None:   # each mask under its image's parameters
                targets = self._masks_drawn(targets, params)
        images = normalize_batch(self.on_device(pixels, plan), output)
        return self.on_batch(images, targets, plan)


    def _masks_drawn(self, targets, params):
        masks = targets if self.mask_alone else targets["mask"]
        rows = masks.cpu().numpy().copy()
        for j in range(len(rows)):
            rows[j] = self.host.apply_drawn_to_mask(rows[j], params, j, self.ignore_index)
        moved = torch.from_numpy(rows).to(masks.device)
        return moved if self.mask_alone else {**targets, "mask": moved}


def store_classes(store) -> int | None:
    """How many classes the store's labels have, when it knows (for the mixers)."""
    return len(store.classes) if store.classes else None


def transforming(store, spec: TransformSpec, seed: int, batched_on_device: bool,
                 ignore_index: int = 255) -> Transforming | None:
    """The transforms of ``spec`` for a source reading ``store``; None when there are none.
    A TransformError first when the store's boxes cannot follow one of them.
    ``batched_on_device``: a CUDA output, where the trailing built-ins run batched; but not
    for a store with masks, which follow the per-sample transforms where they are made."""
    if not (spec.transforms or spec.batch_transforms):
        return None
    masks = per_pixel(store.fields)
    made = Transforming(spec, seed, store_classes(store), batched_on_device and not masks,
                        ignore_index if masks else None, list(store.fields) == masks)
    check_transforms_for_targets(store.fields, spec.transforms, spec.batch_transforms)
    return made
