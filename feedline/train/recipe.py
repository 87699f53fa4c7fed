"""The trainer's recipe as FeedLoader arguments and a loss: per-sample transforms (RandAugment
or TrivialAugment, ColorJitter, RandomErasing, in timm's order), the batch mixer, the size
schedule, and soft-target cross-entropy when the batch is mixed."""
from __future__ import annotations

import math

from ..config import TransformSpec
from ..size_schedule import ProgressiveSize
from ..transforms import ColorJitter, Mixup, RandAugment, RandomErasing, TrivialAugmentWide
from .recipe_options import RecipeOptions, parse_aa


def sample_transforms(cfg: RecipeOptions) -> list:
    aa, steps = parse_aa(cfg.aa), []
    if aa is not None:
        steps.append(TrivialAugmentWide() if aa[0] == "trivial" else RandAugment(num_ops=aa[1], magnitude=aa[2]))
    if cfg.color_jitter > 0:
        j = cfg.color_jitter
        steps.append(ColorJitter(brightness=j, contrast=j, saturation=j))
    if cfg.reprob > 0:
        steps.append(RandomErasing(p=cfg.reprob))
    return steps


def batch_transforms(cfg: RecipeOptions, num_classes: int | None) -> list:
    """timm's Mixup with the run's label smoothing (the loss then smooths nothing itself)."""
    if not cfg.mixing:
        return []
    return [Mixup(mixup_alpha=cfg.mixup, cutmix_alpha=cfg.cutmix, prob=cfg.mixup_prob,
                  switch_prob=cfg.mixup_switch_prob, label_smoothing=cfg.label_smoothing, num_classes=num_classes)]


def train_size(cfg: RecipeOptions):
    """--size, or FFCV's progressive schedule from --size-start to --size."""
    if cfg.size_start is None:
        return cfg.size
    step = min(32, math.gcd(cfg.size_start, cfg.size))
    return ProgressiveSize(cfg.size_start, cfg.size, cfg.size_ramp_epochs, step=step)


def loader_options(cfg: RecipeOptions, train: bool, num_classes: int | None) -> dict:
    """FeedLoader's size and transforms (a TransformSpec) for the training or validation loader."""
    if not train:
        return {"size": cfg.eval_size or cfg.size}
    return {"size": train_size(cfg),
            "transforms": TransformSpec(sample_transforms(cfg), batch_transforms(cfg, num_classes))}
