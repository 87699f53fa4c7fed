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
device, uint8 or float, finite: the whole-batch way computes a sample's unmixed pixels as
x * 1 + partner * 0).

On the CPU a batch is mixed in place a pair of samples at a time, in one pass over its memory
(mix_rows.py); on a device, and for batches small enough for the cache, with a few
whole-batch tensor operations.
Both use timm's and torchvision's own formulas and rounding, and neither runs Python per
pixel: the arithmetic runs without the GIL, which the training process needs for its step.
"""
from __future__ import annotations

import numpy as np
import torch

from . import mix_rows
from .base import check_probability
from .scratch import Scratch
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


def blend_weights(lam, one_draw: bool, device):
    """(w, 1 - w) as timm computes them: one lambda per batch as Python floats, 1 - lambda in
    double (timm's _mix_batch and mixup_target, torchvision's MixUp); else float32 (N,)
    tensors, 1 - lambda in float32 (timm's _mix_elem and _mix_pair keep a float32 lam_batch)."""
    if one_draw:
        return float(lam[0]), 1.0 - float(lam[0])
    w = torch.as_tensor(np.asarray(lam, dtype=np.float32), device=device)
    return w, 1 - w


def box_mask(out: torch.Tensor, boxes: np.ndarray, cutting: np.ndarray) -> torch.Tensor:
    """``out`` (N x 1 x H x W, float) set to 1 inside sample k's box (y0, y1, x0, x1) where
    ``cutting[k]``, 0 elsewhere: rows and columns compared with aranges, then multiplied."""
    height, width, device = out.shape[-2], out.shape[-1], out.device
    b = torch.as_tensor(np.where(cutting[:, None], boxes, 0), device=device)
    ys = torch.arange(height, device=device).view(1, 1, height, 1)
    xs = torch.arange(width, device=device).view(1, 1, 1, width)
    rows = ((ys >= b[:, 0, None, None, None]) & (ys < b[:, 1, None, None, None])).to(out.dtype)
    cols = ((xs >= b[:, 2, None, None, None]) & (xs < b[:, 3, None, None, None])).to(out.dtype)
    return torch.mul(rows, cols, out=out)


def mix_with_partners(x: torch.Tensor, partners: torch.Tensor, lam, cutting, boxes, one_draw: bool,
                      scratch: tuple[Scratch, Scratch]) -> torch.Tensor:
    """In place, sample k with sample ``partners[k]``: a cut sample takes the partner's pixels in
    its box, the others blend x * lam + partner * (1 - lam), timm's formula and rounding. Whole
    batch tensor ops, no Python per sample; ``scratch`` holds the partners' copy and the boxes'
    mask. ``one_draw``: every sample shares sample 0's draw (timm's mode "batch",
    torchvision's): one box slice, or one blend with Python-float weights, as they do."""
    cutting = np.asarray(cutting, bool)
    blending = ~cutting & (np.asarray(lam) != 1.0)
    if not (cutting.any() or blending.any()):
        return x
    if one_draw and cutting[0]:   # only the box's pixels copied: one slice, as timm's _mix_batch
        y0, y1, x0, x1 = (int(v) for v in boxes[0])
        x[:, :, y0:y1, x0:x1] = x[:, :, y0:y1, x0:x1].index_select(0, partners)
        return x
    partner = torch.index_select(x, 0, partners, out=scratch[0].like(x))   # x is written below
    if cutting.any():
        # lerp with a weight of exactly 0 or 1 keeps x or takes the partner, bit for bit
        # (torch.where with a broadcast mask is several times slower on the CPU)
        n, _, height, width = x.shape
        x.lerp_(partner, box_mask(scratch[1].empty((n, 1, height, width), x.dtype, x.device), boxes, cutting))
    if blending.any():   # a sample that does not blend gets (1, 0): x * 1 + partner * 0 is x
        w, w1 = blend_weights(np.where(blending, lam, 1.0), one_draw, x.device)
        if not one_draw:
            w, w1 = w.view(-1, 1, 1, 1), w1.view(-1, 1, 1, 1)
        x.mul_(w).add_(partner.mul_(w1))
    return x


def mix_batch(images: torch.Tensor, partners: torch.Tensor, params: dict, one_draw: bool,
              scratch: tuple[Scratch, Scratch]) -> torch.Tensor:
    """The whole-batch way, on any device: in float32 (float32 images in place), rounded and
    clamped back for integer images, returned in the images' dtype."""
    mixed = mix_with_partners(images.float(), partners, params["lam"], params["cutmix"], params["boxes"],
                              one_draw, scratch)
    if not images.is_floating_point():
        mixed = mixed.round_().clamp_(0, 255)
    return mixed.to(images.dtype)


class Mixup:
    """timm's Mixup(mixup_alpha, cutmix_alpha, prob, switch_prob, mode, correct_lam,
    label_smoothing, num_classes, multi_label); cutmix_minmax is not supported. Multi-hot
    targets of an int or bool dtype are smoothed as multi_label=True without being asked."""

    MODES = ("batch", "pair", "elem")
    PAIRING = mix_rows.FLIP

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
        self._scratch = (Scratch(), Scratch())   # the partners' copy and the boxes' mask, kept between batches
        self._rows_scratch = Scratch()            # a few samples' rows, for the CPU's pass

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

    def partners(self, n: int, device) -> torch.Tensor:
        """timm's partners (``flip(0)``): sample n - 1 - i for sample i; an odd middle is its own."""
        return torch.arange(n - 1, -1, -1, device=device)

    def mix_images(self, images: torch.Tensor, params: dict) -> torch.Tensor:
        """The images mixed (same dtype), in place where ``apply`` says."""
        one_draw = self.mode == "batch"
        if mix_rows.fits(images):
            draw = mix_rows.RowDraw.of(params["lam"], params["cutmix"], params["boxes"], one_draw)
            return mix_rows.mix_rows(images, self.PAIRING, draw, self._rows_scratch)
        return mix_batch(images, self.partners(len(images), images.device), params, one_draw, self._scratch)

    def paste_masks(self, masks: torch.Tensor, params: dict) -> torch.Tensor:
        """Masks (N x H x W) as CutMix means them: a cut sample's mask takes its partner's classes
        in the box, where its pixels took the partner's pixels; the others keep theirs."""
        n, height, width = masks.shape
        inside = box_mask(torch.empty((n, 1, height, width), device=masks.device), params["boxes"],
                          np.asarray(params["cutmix"], bool))[:, 0] > 0
        return torch.where(inside, masks[self.partners(n, masks.device)], masks)

    def apply(self, images: torch.Tensor, targets: torch.Tensor, params: dict, multi_hot: bool = False):
        """Mixed images (same dtype) and mixed probability targets (N, C) float32. Float images
        are mixed in place, as timm does (the loader's batch: no second batch in memory), and
        so is every CPU batch ``mix_rows.fits``. ``multi_hot``: float (N, C) targets are
        multi-hot labels, smoothed toward 0.5."""
        owner = f"{type(self).__name__}(batch_transforms)"
        soft = soft_targets(targets.to(images.device), self.num_classes, self.label_smoothing, owner,
                            self.multi_label or multi_hot)
        one_draw = self.mode == "batch"
        partners = self.partners(len(images), images.device)
        mixed = self.mix_images(images, params)
        w, w1 = blend_weights(params["lam"], one_draw, images.device)
        if not one_draw:
            w, w1 = w.view(-1, 1), w1.view(-1, 1)
        return mixed, soft * w + soft[partners] * w1

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
    PAIRING = mix_rows.ROLL

    def _cut_boxes(self, lam, cy, cx, height: int, width: int):
        return torchvision_cut_boxes(lam, cy, cx, height, width)

    def partners(self, n: int, device) -> torch.Tensor:
        """torchvision's partners (``roll(1, 0)``): sample i - 1 for sample i, the last for the first."""
        return (torch.arange(n, device=device) - 1) % n


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
