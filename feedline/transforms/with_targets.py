"""Which built-in transforms a store's targets allow. Boxes follow the crop and flip
(`feedline.boxes`), but not the affine ops of the auto-augments (shear,
translate, rotate) nor a mixer's pasted or blended partner: with boxes these are refused
before an epoch starts, by name, rather than delivering boxes that no longer match the
pixels. Photometric ops (colour, blur, erasing) leave every box where it is and pass."""
from __future__ import annotations

from .autoaugment import RandAugment, TrivialAugmentWide
from .timm_augment import TimmRandAugment
from .base import TransformError
from .mix import Mixup
from .runner import BATCH_OPS, SAMPLE_OPS

GEOMETRIC = (RandAugment, TrivialAugmentWide, TimmRandAugment)   # their op sets include ShearX/Y, TranslateX/Y, Rotate


def check_transforms_for_targets(fields, transforms=(), batch_transforms=()) -> None:
    """TransformError naming the first transform the store's ``fields`` (a Store's ``fields``,
    or their names) cannot follow: geometric built-ins and mixers when there are boxes."""
    if "boxes" not in fields:
        return
    for where, listed in (("transforms", transforms), ("batch_transforms", batch_transforms)):
        for k, t in enumerate(_listed(listed)):
            kind = (SAMPLE_OPS.get(t) or BATCH_OPS.get(t) or str) if isinstance(t, str) else type(t)  # a name too
            if issubclass(kind, GEOMETRIC):
                raise TransformError(
                    f"{where}[{k}]: {kind.__name__} shears, translates and rotates the pixels, and the "
                    f"store's boxes do not follow those ops (only the crop, resize and flip): leave it out "
                    f"for a store with boxes, or use photometric transforms (ColorJitter, GaussianBlur, "
                    f"RandomErasing)")
            if issubclass(kind, Mixup):
                raise TransformError(
                    f"{where}[{k}]: {kind.__name__} blends or pastes another sample into each image, and "
                    f"the store's boxes cannot follow it: leave it out for a store with boxes")


def _listed(value) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]
