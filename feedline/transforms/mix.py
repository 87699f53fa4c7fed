"""Batch mixers: timm's Mixup (timm.data.mixup, as of timm 1.0.31) and torchvision v2's MixUp
and CutMix, each with its own pairing and box.

timm's Mixup picks MixUp or CutMix per batch (``switch_prob``) with probability ``prob``; the
partner of sample i is sample n - 1 - i (timm flips the batch); mode "batch" draws one lambda
per batch, "pair" one per pair (i, n - 1 - i), "elem" one per sample. Its CutMix box has
sides int(H * sqrt(1 - lambda)), int(W * sqrt(1 - lambda)) around a uniform pixel: from
cy - cut_h // 2 to cy + (cut_h + 1) // 2, clipped; lambda is then corrected to the box.
Targets become probability vectors: int labels one-hot with off = eps / C, on = 1 - eps + eps / C;
multi-hot targets (N, C) smoothed toward 0.5, y * (1 - eps) + eps / 2 (timm's multi_label=True).

torchvision's MixUp and CutMix pair sample i with sample i - 1 (``roll(1)``), one lambda per
batch; CutMix's box has half sides int(0.5 * sqrt(1 - lambda) * W) (and H) around a uniform
pixel, clipped. Every draw is a pure function of (seed, epoch, the batch's first sample index),
so thread count and resume point cannot change it. Images are N x C x H x W tensors (any
device, uint8 or float).
"""
from __future__ import annotations

import numpy as np
import torch

from .base import check_probability
from .streams import generator, stream_of


def cut_boxes(lam: np.ndarray, cy: np.ndarray, cx: np.ndarray, height: int, width: int):
    """timm's rand_bbox (1.0.31): int64 (y0, y1, x0, x1) per sample, and lambda corrected by
    the area."""
    ratio = np.sqrt(1.0 - lam)
    cut_h, cut_w = (height * ratio).astype(np.int64), (width * ratio).astype(np.int64)
    y0, y1 = np.clip(cy - cut_h // 2, 0, height), np.clip(cy + (cut_h + 1) // 2, 0, height)
    x0, x1 = np.clip(cx - cut_w // 2, 0, width), np.clip(cx + (cut_w + 1) // 2, 0, width)
    return np.stack([y0, y1, x0, x1], 1), 1.0 - (y1 - y0) * (x1 - x0) / float(height * width)


def torchvision_cut_boxes(lam: np.ndarray, cy: np.ndarray, cx: np.ndarray, height: int, width: int):
    """torchvision v2 CutMix.make_params: int64 (y0, y1, x0, x1) per sample, corrected lambda."""
    r = 0.5 * np.sqrt(1.0 - lam)
    half_w, half_h = (r * width).astype(np.int64), (r * height).astype(np.int64)
    x0, y0 = np.maximum(cx - half_w, 0), np.maximum(cy - half_h, 0)
    x1, y1 = np.minimum(cx + half_w, width), np.minimum(cy + half_h, height)
    return np.stack([y0, y1, x0, x1], 1), 1.0 - (x1 - x0) * (y1 - y0) / float(width * height)


def check_label_range(labels: np.ndarray, num_classes: int, owner: str) -> None:
    if len(labels) and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise ValueError(f"{owner}: a label is outside 0..{num_classes - 1} (num_classes="
                         f"{num_classes}): {int(labels.min())}..{int(labels.max())}")


def soft_targets(targets: torch.Tensor, num_classes: int | None, smoothing: float,
                 owner: str, multi_label: bool = False) -> torch.Tensor:
    """Int labels (N,) -> smoothed one-hot (N, C); multi-hot (N, C) of an int or bool dtype (or
    any dtype with ``multi_label``) -> smoothed toward 0.5 as timm's multi_label=True; float
    probability vectors (N, C) pass unchanged (a batch mixed before)."""
    if targets.dim() == 2:
        if targets.is_floating_point() and not multi_label:
            return targets
        return targets.float() * (1.0 - smoothing) + 0.5 * smoothing
    if num_classes is None:
        raise ValueError(f"{owner}: num_classes is required to turn int labels into probability "
                         f"vectors; pass {owner.split('(')[0]}(..., num_classes=C)")
    if targets.dim() != 1 or targets.is_floating_point():
        raise ValueError(f"{owner}: targets must be int labels (N,) or probabilities (N, C), "
                         f"got {tuple(targets.shape)} {targets.dtype}")
    if targets.device.type == "cpu":  # on a device, reading the range back would wait for the stream
        check_label_range(targets.numpy(), num_classes, owner)
    off = smoothing / num_classes
    out = torch.full((len(targets), num_classes), off, dtype=torch.float32, device=targets.device)
    return out.scatter_(1, targets.long()[:, None], 1.0 - smoothing + off)


def mix_pairs(x: torch.Tensor, lam, cutting, boxes) -> None:
    """In place, timm's pairing: each sample i with its partner j = n - 1 - i, one pair at a
    time, holding one sample's copy (i's original, for j); a cut sample takes the partner's
    pixels in its box, the others blend lam * x + (1 - lam) * partner. The middle sample of an
    odd batch is its own partner: unchanged."""
    n = x.shape[0]
    original = torch.empty_like(x[0]) if n > 1 else None
    for i in range(n // 2):
        j = n - 1 - i
        original.copy_(x[i])
        for k, partner in ((i, x[j]), (j, original)):
            if cutting[k]:
                y0, y1, x0, x1 = (int(v) for v in boxes[k])
                x[k, :, y0:y1, x0:x1] = partner[:, y0:y1, x0:x1]
            else:
                x[k].lerp_(partner, 1.0 - float(lam[k]))


def mix_rolled(x: torch.Tensor, lam, cutting, boxes) -> torch.Tensor:
    """torchvision's pairing: sample i with sample i - 1 (the first with the last), as
    ``roll(1, 0)``; returns the mixed batch (torchvision keeps the rolled copy too)."""
    rolled = x.roll(1, 0)
    out = x.clone()
    for k in range(x.shape[0]):
        if cutting[k]:
            y0, y1, x0, x1 = (int(v) for v in boxes[k])
            out[k, :, y0:y1, x0:x1] = rolled[k, :, y0:y1, x0:x1]
        else:
            out[k].lerp_(rolled[k], 1.0 - float(lam[k]))
    return out


class Mixup:
    """timm's Mixup(mixup_alpha, cutmix_alpha, prob, switch_prob, mode, correct_lam,
    label_smoothing, num_classes, multi_label); cutmix_minmax is not supported. Multi-hot
    targets of an int or bool dtype are smoothed as multi_label=True without being asked."""

    MODES = ("batch", "pair", "elem")

    def __init__(self, mixup_alpha: float = 1.0, cutmix_alpha: float = 0.0, prob: float = 1.0,
                 switch_prob: float = 0.5, mode: str = "batch", correct_lam: bool = True,
                 label_smoothing: float = 0.1, num_classes: int | None = None, multi_label: bool = False):
        name = type(self).__name__
        for arg, v in (("mixup_alpha", mixup_alpha), ("cutmix_alpha", cutmix_alpha)):
            if not isinstance(v, (int, float)) or v < 0:
                raise ValueError(f"{name}: {arg} must be a number >= 0, got {v!r}")
        if mixup_alpha == 0 and cutmix_alpha == 0:
            raise ValueError(f"{name}: mixup_alpha or cutmix_alpha must be > 0")
        self.prob = check_probability(name, "prob", prob)
        self.switch_prob = check_probability(name, "switch_prob", switch_prob)
        self.label_smoothing = check_probability(name, "label_smoothing", label_smoothing)
        if mode not in self.MODES:
            raise ValueError(f"{name}: mode must be {' or '.join(map(repr, self.MODES))}, got {mode!r}")
        if num_classes is not None and (not isinstance(num_classes, int) or num_classes < 1):
            raise ValueError(f"{name}: num_classes must be a positive int, got {num_classes!r}")
        self.mixup_alpha, self.cutmix_alpha = float(mixup_alpha), float(cutmix_alpha)
        self.mode, self.correct_lam, self.num_classes = mode, correct_lam, num_classes
        self.multi_label = bool(multi_label)
        self._occurrence = 0

    @property
    def stream(self) -> int:
        return stream_of(type(self).__name__, self._occurrence)

    def _cut_boxes(self, lam, cy, cx, height: int, width: int):
        return cut_boxes(lam, cy, cx, height, width)

    def draw(self, seed: int, epoch: int, indices, height: int, width: int) -> dict:
        """Per sample: lam (the mixing weight), cutmix (a box is pasted), boxes (y0, y1, x0, x1),
        beta (lambda as drawn, before the box correction) and center (y, x) of the box."""
        n = len(indices)
        rng = generator(seed, epoch, int(indices[0]) if n else 0, self.stream)
        k = {"elem": n, "pair": n // 2}.get(self.mode, 1)
        mixing = rng.random(k) < self.prob
        use_cut = rng.random(k) < self.switch_prob
        if self.mixup_alpha == 0 or self.cutmix_alpha == 0:
            use_cut[:] = self.mixup_alpha == 0
        lam_cut = rng.beta(self.cutmix_alpha, self.cutmix_alpha, k) if self.cutmix_alpha else np.ones(k)
        lam_mix = rng.beta(self.mixup_alpha, self.mixup_alpha, k) if self.mixup_alpha else np.ones(k)
        beta = np.where(mixing, np.where(use_cut, lam_cut, lam_mix), 1.0)
        center = np.stack([rng.integers(0, height, k), rng.integers(0, width, k)], 1).reshape(k, 2)
        boxes, corrected = self._cut_boxes(beta, center[:, 0], center[:, 1], height, width)
        cutting = use_cut & (beta < 1.0)
        lam = np.where(cutting, corrected, beta) if self.correct_lam else beta
        params = {"lam": lam, "cutmix": cutting, "boxes": boxes, "beta": beta, "center": center}
        if self.mode == "batch":  # every sample shares the batch's draw
            params = {key: np.repeat(v, n, axis=0) for key, v in params.items()}
        elif self.mode == "pair":  # sample n - 1 - i shares pair i's draw; an odd middle is left alone
            params = {key: _pairs_to_samples(v, n, key) for key, v in params.items()}
        return params

    def _mix_images(self, x: torch.Tensor, params: dict) -> torch.Tensor:
        mix_pairs(x, params["lam"], params["cutmix"], params["boxes"])
        return x

    def _partner(self, t: torch.Tensor) -> torch.Tensor:
        return t.flip(0)

    def apply(self, images: torch.Tensor, targets: torch.Tensor, params: dict, multi_hot: bool = False):
        """Mixed images (same dtype) and mixed probability targets (N, C) float32. Float images
        are mixed in place, as timm does (the loader's batch: no second batch in memory).
        ``multi_hot``: float (N, C) targets are multi-hot labels, smoothed toward 0.5."""
        owner = f"{type(self).__name__}(batch_transforms)"
        soft = soft_targets(targets.to(images.device), self.num_classes, self.label_smoothing, owner,
                            self.multi_label or multi_hot)
        mixed = self._mix_images(images.float(), params)
        if not images.is_floating_point():
            mixed = mixed.round_().clamp_(0, 255)
        lam_t = torch.as_tensor(params["lam"], dtype=torch.float32, device=images.device).reshape(-1, 1)
        return mixed.to(images.dtype), soft * lam_t + self._partner(soft) * (1 - lam_t)

    def __call__(self, images, targets, *, seed: int, epoch: int, indices, multi_hot: bool = False):
        return self.apply(images, targets, self.draw(seed, epoch, indices, *images.shape[-2:]), multi_hot)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({args})"


def _pairs_to_samples(v: np.ndarray, n: int, key: str) -> np.ndarray:
    """timm's pair mode: the draws of the n // 2 pairs, then the same reversed; the middle of
    an odd batch gets lambda 1 and no box."""
    if n % 2 == 0:
        return np.concatenate([v, v[::-1]])
    middle = {"lam": np.ones(1), "beta": np.ones(1), "cutmix": np.zeros(1, bool)}.get(key)
    if middle is None:
        middle = np.zeros((1,) + v.shape[1:], v.dtype)
    return np.concatenate([v, middle.astype(v.dtype), v[::-1]])


class _TorchvisionMixer(Mixup):
    """torchvision's pairing (``roll(1)``: sample i with i - 1) and CutMix box."""

    MODES = ("batch", "elem")

    def _cut_boxes(self, lam, cy, cx, height: int, width: int):
        return torchvision_cut_boxes(lam, cy, cx, height, width)

    def _mix_images(self, x: torch.Tensor, params: dict) -> torch.Tensor:
        return mix_rolled(x, params["lam"], params["cutmix"], params["boxes"])

    def _partner(self, t: torch.Tensor) -> torch.Tensor:
        return t.roll(1, 0)


class MixUp(_TorchvisionMixer):
    """torchvision v2's MixUp(alpha, num_classes): sample i blended with sample i - 1 with one
    lambda ~ Beta(alpha, alpha) per batch; ``label_smoothing`` (default off) and mode "elem"
    (one lambda per sample) are feedline's additions."""

    def __init__(self, alpha: float = 1.0, num_classes: int | None = None, label_smoothing: float = 0.0,
                 mode: str = "batch"):
        super().__init__(mixup_alpha=alpha, cutmix_alpha=0.0, label_smoothing=label_smoothing,
                         num_classes=num_classes, mode=mode)


class CutMix(_TorchvisionMixer):
    """torchvision v2's CutMix(alpha, num_classes): sample i takes sample i - 1's pixels in
    torchvision's box; lambda corrected to the box."""

    def __init__(self, alpha: float = 1.0, num_classes: int | None = None, label_smoothing: float = 0.0,
                 mode: str = "batch"):
        super().__init__(mixup_alpha=0.0, cutmix_alpha=alpha, label_smoothing=label_smoothing,
                         num_classes=num_classes, mode=mode)
