"""The trainer's recipe as FeedLoader arguments, with timm's meaning: per-sample transforms
(timm's RandAugment or torchvision's TrivialAugmentWide, ColorJitter), then on the normalized
batch timm's random erasing and timm's Mixup, in timm's order; the size schedule."""
from __future__ import annotations

import math

from ..planning.augment import AugmentSpec
from ..core.config import IMAGENET_MEAN, TransformSpec
from ..planning.size_schedule import ProgressiveSize
from ..transforms import ColorJitter, Mixup, TimmRandAugment, TimmRandomErasing, TrivialAugmentWide
from ..transforms.timm_augment import timm_fill
from .recipe_options import RecipeOptions, parse_aa


def sample_transforms(cfg: RecipeOptions) -> list:
    """As timm's transforms_factory: the auto-augment (its fill the normalization mean in
    pixels), or else ColorJitter (timm applies --color-jitter only without --aa)."""
    aa, steps = parse_aa(cfg.aa), []
    if aa is not None:
        steps.append(TrivialAugmentWide() if aa[0] == "trivial" else
                     TimmRandAugment(aa[1], img_mean=timm_fill(IMAGENET_MEAN)))
    elif cfg.color_jitter > 0:
        j = cfg.color_jitter
        steps.append(ColorJitter(brightness=j, contrast=j, saturation=j))
    return steps


def batch_transforms(cfg: RecipeOptions, num_classes: int | None) -> list:
    """timm's random erasing on the normalized batch (its transforms_factory erases after
    normalizing), then timm's Mixup with the run's label smoothing (the loss then smooths
    nothing itself)."""
    steps: list = []
    if cfg.reprob > 0:
        steps.append(TimmRandomErasing(probability=cfg.reprob, mode=cfg.remode))
    if cfg.mixing:
        steps.append(Mixup(mixup_alpha=cfg.mixup, cutmix_alpha=cfg.cutmix, prob=cfg.mixup_prob,
                           switch_prob=cfg.mixup_switch_prob, mode=cfg.mixup_mode,
                           label_smoothing=cfg.label_smoothing, num_classes=num_classes))
    return steps


def train_size(cfg: RecipeOptions):
    """--size, or FFCV's progressive schedule from --size-start to --size."""
    if cfg.size_start is None:
        return cfg.size
    step = min(32, math.gcd(cfg.size_start, cfg.size))
    return ProgressiveSize(cfg.size_start, cfg.size, cfg.size_ramp_epochs, step=step)


def loader_options(cfg: RecipeOptions, train: bool, num_classes: int | None) -> dict:
    """FeedLoader's size and transforms (a TransformSpec) for the training loader; its
    AugmentSpec (size, center crop) for the validation loader."""
    if not train:
        return {"augment": AugmentSpec(size=cfg.eval_size or cfg.size, train=False, crop_fraction=cfg.crop_pct)}
    return {"size": train_size(cfg),
            "transforms": TransformSpec(sample_transforms(cfg), batch_transforms(cfg, num_classes))}
