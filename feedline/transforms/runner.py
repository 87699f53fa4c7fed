"""The two runners an engine calls: SampleTransforms for ``transforms=[...]`` (per sample,
after the crop and flip) and BatchTransforms for ``batch_transforms=[...]`` (the finished
batch). Both accept built-ins (instances, or their names for the defaults) and user callables.

A user callable in ``transforms`` is called as ``fn(image, rng)``: ``image`` a uint8
H x W x 3 array, ``rng`` a numpy Generator seeded from (seed, epoch, index) and its own
stream; it returns a uint8 array of the same shape. A user callable in ``batch_transforms``
is called as ``fn(images, targets)`` and returns ``(images, targets)``.

How an engine uses them (per batch plan ``bp`` of epoch ``e``, loader seed ``s``):
- host output (CPU): ``drawn = sample.draw(s, e, bp.indices)`` once, then on each decode
  thread, after the crop and flip, ``img = sample.apply_drawn(img, drawn, k, s, e, bp.indices[k])``.
- CUDA output: ``host, device = sample.split()``; ``host`` runs in the workers as
  above; on the side stream, after the copy and before normalizing,
  ``images = device.apply_batch(images, s, e, bp.indices)``.
- then, on the finished batch: ``images, targets = batch.apply(images, targets, s, e, bp.indices)``.
"""
from __future__ import annotations

import copy
from typing import Sequence

import numpy as np
import torch

from .autoaugment import RandAugment, TrivialAugmentWide
from .base import Params, SampleOp, TransformError, row
from .blur import GaussianBlur
from .erasing import RandomErasing
from .jitter import ColorJitter, RandomGrayscale
from .mix import CutMix, Mixup, MixUp, check_label_range
from .streams import generator, stream_of
from .timm_augment import TimmRandAugment
from .timm_erasing import TimmRandomErasing

SAMPLE_OPS = {c.__name__: c for c in (RandAugment, TrivialAugmentWide, TimmRandAugment, ColorJitter,
                                      RandomGrayscale, GaussianBlur, RandomErasing)}
BATCH_OPS = {c.__name__: c for c in (MixUp, CutMix, Mixup, TimmRandomErasing)}


def _resolve(item, i: int, argument: str, known: dict, other: dict, other_argument: str):
    """An entry of a transforms list as an object: a name becomes the built-in's default."""
    if isinstance(item, str):
        if item in known:
            return known[item]()
        hint = (f"; {item} belongs in {other_argument}" if item in other
                else f"; known: {', '.join(known)} (or pass a callable)")
        raise TransformError(f"{argument}[{i}]: unknown op {item!r}{hint}")
    if isinstance(item, tuple(other.values())):
        raise TransformError(f"{argument}[{i}]: {type(item).__name__} belongs in {other_argument}")
    if not callable(item) and not isinstance(item, SampleOp):
        raise TransformError(f"{argument}[{i}]: expected a transform or a callable, got "
                             f"{type(item).__name__}")
    return item


def _name(step) -> str:
    return type(step).__name__ if isinstance(step, (SampleOp, Mixup, TimmRandomErasing)) else getattr(
        step, "__qualname__", type(step).__name__)


class SampleTransforms:
    """The per-sample transforms, each on its own random stream (class name + occurrence)."""

    def __init__(self, transforms: Sequence = (), argument: str = "transforms"):
        self.argument = argument
        seen: dict[str, int] = {}
        self.steps: list = []
        self.streams: list[int] = []
        self.positions: list[int] = []
        for i, item in enumerate(transforms or ()):
            step = _resolve(item, i, argument, SAMPLE_OPS, BATCH_OPS, "batch_transforms")
            name = _name(step)
            occurrence = seen[name] = seen.get(name, -1) + 1
            self.steps.append(step.with_occurrence(occurrence) if isinstance(step, SampleOp) else step)
            self.streams.append(stream_of(name, occurrence))
            self.positions.append(i)

    def __len__(self) -> int:
        return len(self.steps)

    def _part(self, start: int, stop: int) -> "SampleTransforms":
        part = SampleTransforms((), self.argument)
        part.steps, part.streams = self.steps[start:stop], self.streams[start:stop]
        part.positions = self.positions[start:stop]
        return part

    def split(self) -> tuple["SampleTransforms", "SampleTransforms"]:
        """(host part, device part): the device part is the longest run of built-ins at the end,
        which can run batched on the GPU after the copy without changing the order."""
        cut = len(self.steps)
        while cut and isinstance(self.steps[cut - 1], SampleOp):
            cut -= 1
        return self._part(0, cut), self._part(cut, len(self.steps))

    def draw(self, seed: int, epoch: int, indices) -> list[Params | None]:
        """Every built-in's parameters for the samples ``indices`` (None for user callables)."""
        return [s.draw(seed, epoch, indices) if isinstance(s, SampleOp) else None for s in self.steps]

    def apply(self, sample: np.ndarray, seed: int, epoch: int, index: int) -> np.ndarray:
        """One uint8 H x W x 3 sample through every transform, on the calling (decode) thread."""
        return self.apply_drawn(sample, self.draw(seed, epoch, [index]), 0, seed, epoch, index)

    def apply_drawn(self, sample: np.ndarray, drawn: list, i: int, seed: int, epoch: int,
                    index: int) -> np.ndarray:
        """Like ``apply`` with parameters drawn for a whole batch; ``i`` is the sample's row."""
        for step, params, stream, pos in zip(self.steps, drawn, self.streams, self.positions):
            if params is not None:
                sample = step.apply_cpu(sample, row(params, i))
            else:
                try:
                    out = step(sample, generator(seed, epoch, index, stream))
                except Exception as exc:
                    exc.add_note(f"in {self.argument}[{pos}] ({_name(step)}) on sample {index}")
                    raise
                self._check(out, sample, step, pos, index)
                sample = out
        return sample

    def apply_drawn_to_mask(self, mask: np.ndarray, drawn: list, i: int, ignore_index: int) -> np.ndarray:
        """Sample ``i``'s mask (H x W class indices) under the parameters ``apply_drawn`` gave its
        image: the geometric built-ins move it (nearest, the same picks), erasing leaves
        ``ignore_index``, photometric ones leave it. A callable sees the image alone: it must
        not move pixels (as with boxes)."""
        for step, params in zip(self.steps, drawn):
            if params is not None:
                mask = step.apply_mask(mask, row(params, i), ignore_index)
        return mask

    def _check(self, out, given: np.ndarray, step, pos: int, index: int) -> None:
        if (not isinstance(out, np.ndarray) or out.dtype != np.uint8 or out.shape != given.shape):
            got = (f"{out.dtype} array of shape {out.shape}" if isinstance(out, np.ndarray)
                   else type(out).__name__)
            raise TransformError(f"{self.argument}[{pos}] ({_name(step)}) returned a {got} for sample "
                                 f"{index}; it must return a uint8 array of shape {given.shape}, "
                                 f"the shape it was given")

    def apply_batch(self, images: torch.Tensor, seed: int, epoch: int, indices) -> torch.Tensor:
        """A N x 3 x H x W batch (uint8 0..255, or float 0..1) through the built-ins, batched
        with per-sample parameters on the batch's device; same dtype out."""
        hooks = [p for s, p in zip(self.steps, self.positions) if not isinstance(s, SampleOp)]
        if hooks:
            raise TransformError(f"{self.argument}[{hooks[0]}] is a callable: it runs per sample on "
                                 f"the host; run split()'s host part there and batch the rest")
        if not self.steps:
            return images
        x = images.float() if not images.is_floating_point() else (images.float() * 255).round_()
        for step, params in zip(self.steps, self.draw(seed, epoch, indices)):
            x = step.apply_torch(x, params)
        if images.is_floating_point():
            return (x / 255).to(images.dtype)
        return x.to(images.dtype)


class BatchTransforms:
    """The batch transforms: mixers (given ``num_classes`` when they lack it), TimmRandomErasing
    (on the normalized batch) and callables. ``ignore_index``: the targets hold masks (N x H x W,
    the targets themselves when ``mask_alone``, else their "mask"), which CutMix pastes with the
    pixels and erasing sets to ``ignore_index``; a mixer that blends is refused."""

    def __init__(self, transforms: Sequence = (), num_classes: int | None = None,
                 argument: str = "batch_transforms", ignore_index: int | None = None, mask_alone: bool = False):
        self.argument, self.ignore_index, self.mask_alone = argument, ignore_index, mask_alone
        seen: dict[str, int] = {}
        self.steps: list = []
        for i, item in enumerate(transforms or ()):
            if isinstance(item, SampleOp):
                raise TransformError(f"{argument}[{i}]: {type(item).__name__} is per sample: "
                                     f"it belongs in transforms")
            step = _resolve(item, i, argument, BATCH_OPS, SAMPLE_OPS, "transforms")
            if isinstance(step, (Mixup, TimmRandomErasing)):
                step = _bound(step, num_classes, seen)
            self.steps.append(step)

    def apply(self, images: torch.Tensor, targets, seed: int, epoch: int, indices) -> tuple[torch.Tensor, object]:
        """The batch of samples ``indices`` through every batch transform, in order. Targets:
        a tensor, or a dict whose 'label' or 'labels' entry a mixer mixes."""
        for pos, step in enumerate(self.steps):
            if isinstance(step, Mixup):
                images, targets = self._mix(step, pos, images, targets, seed, epoch, indices)
                continue
            if isinstance(step, TimmRandomErasing):
                images = step.apply_batch(images, seed, epoch, indices)
                if self.ignore_index is not None:
                    step.erase_masks(self._masks(targets), seed, epoch, indices, self.ignore_index)
                continue
            out = step(images, targets)
            if (not isinstance(out, tuple) or len(out) != 2 or not isinstance(out[0], torch.Tensor)
                    or out[0].shape[0] != images.shape[0]):
                raise TransformError(f"{self.argument}[{pos}] ({_name(step)}) must return (images, "
                                     f"targets) with images a tensor of {images.shape[0]} samples, "
                                     f"got {type(out).__name__}")
            images, targets = out
        return images, targets

    def check_labels(self, labels: np.ndarray) -> None:
        """The mixers' label range checked on the host, for a batch whose labels are on a device."""
        for pos, step in enumerate(self.steps):
            if isinstance(step, Mixup) and step.num_classes is not None and labels.ndim == 1:
                check_label_range(labels, step.num_classes, f"{_name(step)}({self.argument}[{pos}])")

    def _masks(self, targets) -> torch.Tensor:
        return targets if self.mask_alone else targets["mask"]

    def _mix(self, step: Mixup, pos: int, images, targets, seed: int, epoch: int, indices):
        where = f"{self.argument}[{pos}] ({_name(step)})"
        if self.ignore_index is not None:
            return mix_with_masks(step, where, images, targets, self.mask_alone, seed, epoch, indices)
        if not isinstance(targets, dict):
            return step(images, targets, seed=seed, epoch=epoch, indices=indices)
        if "boxes" in targets:
            raise TransformError(f"{where}: the targets have boxes, which a mixed image cannot keep; "
                                 f"drop the mixer, or the boxes field")
        key = next((k for k in ("label", "labels") if k in targets), None)
        if key is None:
            raise TransformError(f"{where}: mixing needs a 'label' (int) or 'labels' (multi-hot) target; "
                                 f"the targets have {', '.join(map(repr, targets))}")
        images, mixed = step(images, targets[key], seed=seed, epoch=epoch, indices=indices,
                             multi_hot=key == "labels")   # the store's multi-hot: timm's multi_label
        return images, {**targets, key: mixed}


def mix_with_masks(step: Mixup, where: str, images, targets, mask_alone: bool, seed: int, epoch: int, indices):
    """A cutting mixer on a batch with masks: the images mixed, each mask pasted as its pixels
    were (`Mixup.paste_masks`), the labels (if any) mixed as without masks."""
    if step.mixup_alpha > 0:
        raise TransformError(f"{where}: it blends images (mixup_alpha={step.mixup_alpha:g}), and a mask cannot be "
                             "blended (a pixel has one class): use CutMix, which pastes the partner's mask with its "
                             "pixels, or leave the mixer out for a store with masks")
    params = step.draw(seed, epoch, indices, *images.shape[-2:])
    masks = step.paste_masks(targets if mask_alone else targets["mask"], params)
    if mask_alone:
        return step.mix_images(images, params), masks
    key = next((k for k in ("label", "labels") if k in targets), None)
    if key is None:
        return step.mix_images(images, params), {**targets, "mask": masks}
    images, mixed = step.apply(images, targets[key], params, multi_hot=key == "labels")
    return images, {**targets, key: mixed, "mask": masks}



def _bound(mixer, num_classes: int | None, seen: dict):
    """A copy of a built-in batch op on its own stream; a mixer with the store's number of
    classes if it has none."""
    m = copy.copy(mixer)
    name = type(m).__name__
    m._occurrence = seen[name] = seen.get(name, -1) + 1
    if isinstance(m, Mixup) and m.num_classes is None and num_classes is not None:
        m.num_classes = int(num_classes)
    return m
