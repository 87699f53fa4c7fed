"""How a batch's targets beyond one label are made and handed over (the layout of
`TargetColumns.batch_layout`); between the two they live in the Slot (slot.py).

A store whose only field is ``label`` gets none of this: its batches are (images, int64
labels) exactly as before. Otherwise the consumer receives, beside the images, the one
field's tensor (``labels`` multi-hot float32, ``target`` float32, ``keypoints`` float32,
``mask``) or, with several fields or boxes, a dict {name: tensor} with the layout of
``batch_layout`` and the mask (README: "Targets"). Masks are made per pixel where the pixels
are (the workers, the GPU engine), not filled here from columns.
"""
from __future__ import annotations

import numpy as np
import torch

from ..planning.augment import plan as plan_augment
from ..fields import LABEL_ONLY, per_pixel
from .fill import MaskSpec


class TargetSpec:
    """What an engine needs to make a batch's targets: the store's columns, the layout of a
    batch and ``min_box_visibility``. Boxes and keypoints come out in output pixels: each fill
    is given the output size (a size schedule changes it between epochs)."""

    def __init__(self, store, batch_size: int, min_visibility: float):
        self.columns = store.target_columns
        self.layout = self.columns.batch_layout(batch_size)
        self.min_visibility = float(min_visibility)
        self.masks = bool(per_pixel(store.fields))   # made with the pixels: a "mask" beside the layout's
        delivered = [*self.layout, *(["mask"] if self.masks else [])]
        # one field, and not boxes (which come as three arrays): a bare tensor, as the label is
        self.single = delivered[0] if len(delivered) == 1 else None

    def allocate(self, pin: bool) -> dict[str, torch.Tensor]:
        return {name: torch.empty(shape, dtype=getattr(torch, dtype), pin_memory=pin)
                for name, (shape, dtype) in self.layout.items()}

    def fill(self, indices, out: dict[str, np.ndarray], crops, flips, size) -> None:
        self.columns.fill(indices, out, crops=crops, flips=flips, size=tuple(size),
                          min_visibility=self.min_visibility)

    def deliver(self, tensors: dict[str, torch.Tensor], n: int):
        """The first ``n`` rows as the consumer receives them: one tensor, or the dict."""
        if self.single is not None:
            return tensors[self.single][:n]
        return {name: t[:n] for name, t in tensors.items()}

    def batch(self, indices, epoch, sizes) -> dict[str, torch.Tensor]:
        """Fresh tensors of the records ``indices`` actually decoded (substitutes included),
        each with its own crop and flip of ``epoch`` (a pure function of seed, epoch and index:
        the plan's own for the records planned): for the engines that do not decode into a ring."""
        idx = np.asarray(indices, dtype=np.int64)
        hw = np.asarray(sizes)[idx].reshape(-1, 2)
        crops, flips = plan_augment(epoch.spec, epoch.seed, epoch.epoch, idx, hw[:, 0], hw[:, 1])
        tensors = self.allocate(pin=False)
        self.fill(idx, {name: t.numpy() for name, t in tensors.items()}, crops, flips, epoch.spec.size)
        return {name: t[:len(idx)] for name, t in tensors.items()}


def target_spec(store, batch_size: int, min_visibility: float) -> TargetSpec | None:
    """The targets a loader delivers from ``store``; None when the store has only ``label``
    (the classic int64 labels, delivered as they always were)."""
    if store.fields == LABEL_ONLY:
        return None
    return TargetSpec(store, batch_size, min_visibility)


def mask_spec(store, mask_dtype: torch.dtype, ignore_index: int) -> MaskSpec | None:
    """How the workers make the store's masks (None without masks); ValueError, before anything
    starts, when the delivered ``mask_dtype`` cannot hold its classes or ``ignore_index``."""
    names = per_pixel(store.fields)
    if not names:
        return None
    spec = store.fields[names[0]]
    info = torch.iinfo(mask_dtype)
    largest = max(spec.get("values") or [0])
    if not info.min <= ignore_index <= info.max or largest > info.max:
        what = f"ignore_index={ignore_index}" if not info.min <= ignore_index <= info.max else f"class {largest}"
        raise ValueError(f"{store.filename}: masks as {mask_dtype} cannot hold {what}: ask for a wider "
                         "OutputSpec(mask_dtype=...) (torch.int64 holds every class)")
    return MaskSpec(png=spec["codec"] == "png", ignore_index=ignore_index)


def plan_targets(spec: TargetSpec | None, slot) -> None:
    """The planner's part: every row of the Slot's plan from its records, crops and flips."""
    if spec is not None:
        plan = slot.plan
        spec.fill(plan.indices, slot.target_rows, plan.boxes, plan.flips, slot.size)


def substitute_targets(spec: TargetSpec | None, slot, j: int, index: int, crop, flip: bool) -> None:
    """A substitute's part: row ``j`` of the Slot now holds record ``index`` with its own crop and flip."""
    if spec is not None:
        rows = {name: a[j:j + 1] for name, a in slot.target_rows.items()}
        spec.fill([index], rows, np.asarray(crop).reshape(1, 4), [bool(flip)], slot.size)


def batch_targets(spec: TargetSpec | None, slot, n: int):
    """What the consumer receives beside the first ``n`` images of a filled Slot: its labels
    (the classic int64 column) when the store has only ``label``, else its targets."""
    return slot.labels[:n] if spec is None else spec.deliver(slot.targets, n)


def to_device(targets, device: torch.device):
    """A batch's targets (a tensor or a dict of them) copied to ``device`` without blocking."""
    if isinstance(targets, dict):
        return {name: t.to(device, non_blocking=True) for name, t in targets.items()}
    return targets.to(device, non_blocking=True)


def each_tensor(targets) -> list[torch.Tensor]:
    """The device tensors of a batch's targets (for record_stream, which host tensors lack): a
    tensor, a dict's values, or whatever a batch transform returned instead (a list, None)."""
    values = targets.values() if isinstance(targets, dict) else targets if isinstance(targets, (list, tuple)) \
        else [targets]
    return [t for t in values if isinstance(t, torch.Tensor) and t.device.type != "cpu"]
