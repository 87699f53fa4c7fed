"""Augmentations beyond the crop and flip: per-sample built-ins with torchvision's names and
semantics, timm's batch mixers, and the runners that apply them (with user callables) on the
workers or batched on the device. Every parameter is a pure function of
(seed, epoch, index) on the transform's own random stream."""
from .autoaugment import RandAugment, TrivialAugmentWide
from ..core.config import TransformSpec
from ..planning.size_schedule import ProgressiveSize
from .base import SampleOp, TransformError
from .blur import GaussianBlur
from .erasing import RandomErasing
from .jitter import ColorJitter, RandomGrayscale
from .mix import CutMix, Mixup, MixUp
from .runner import BatchTransforms, SampleTransforms
from .timm_augment import TimmRandAugment
from .timm_erasing import TimmRandomErasing

__all__ = ["RandAugment", "TrivialAugmentWide", "TimmRandAugment", "ColorJitter", "RandomGrayscale", "GaussianBlur",
           "RandomErasing", "TimmRandomErasing", "MixUp", "CutMix", "Mixup", "SampleTransforms", "BatchTransforms",
           "SampleOp", "TransformError", "TransformSpec", "ProgressiveSize"]
