"""Which built-in transforms a store's targets allow. Each field kind says which families of
transform it cannot follow (`feedline.fields`): boxes and keypoints follow the crop and flip,
but not the affine ops of the auto-augments (shear, translate, rotate) nor a
mixer's pasted or blended partner; masks follow every geometric op and a pasted partner
(CutMix), but no blend (MixUp). These are refused before an epoch starts, by name, rather
than delivering targets that no longer match the pixels. Photometric ops (colour, blur,
erasing) leave every point where it is and pass."""
from __future__ import annotations

from ..fields import BLENDING, GEOMETRIC, MIXING, refusing
from .autoaugment import RandAugment, TrivialAugmentWide
from .timm_augment import TimmRandAugment
from .base import TransformError
from .mix import Mixup
from .runner import BATCH_OPS, SAMPLE_OPS

FAMILIES = {GEOMETRIC: (RandAugment, TrivialAugmentWide, TimmRandAugment),   # ShearX/Y, TranslateX/Y, Rotate
            MIXING: (Mixup,), BLENDING: (Mixup,)}


def _in_family(t, kind: type, family: str) -> bool:
    """Whether transform ``t`` (an object, or a built-in's name: its default) is of ``family``."""
    if not issubclass(kind, FAMILIES[family]):
        return False
    if family == BLENDING:   # a Mixup blends unless it only cuts (CutMix, mixup_alpha=0)
        return (kind() if isinstance(t, str) else t).mixup_alpha > 0
    return True


def check_transforms_for_targets(fields, transforms=(), batch_transforms=()) -> None:
    """TransformError naming the first transform the store's ``fields`` (a Store's ``fields``,
    or their names) cannot follow: geometric built-ins and mixers with boxes or keypoints,
    blending mixers with masks."""
    for where, listed in (("transforms", transforms), ("batch_transforms", batch_transforms)):
        for k, t in enumerate(_listed(listed)):
            kind = (SAMPLE_OPS.get(t) or BATCH_OPS.get(t) or str) if isinstance(t, str) else type(t)  # a name too
            for family in FAMILIES:
                names = refusing(fields, family)
                if names and _in_family(t, kind, family):
                    verb = "do" if len(names) > 1 or names[0].endswith("s") else "does"
                    raise TransformError(f"{where}[{k}]: {kind.__name__} {_WHY[family]}, and the store's "
                                         f"{' and '.join(names)} {verb} not follow it: {_ADVICE[family]}")


_WHY = {GEOMETRIC: "shears, translates and rotates the pixels",
        MIXING: "blends or pastes another sample into each image",
        BLENDING: "blends another sample into each image"}
_ADVICE = {GEOMETRIC: "leave it out for such a store (its targets follow only the crop, resize and flip), or "
                      "use photometric transforms (ColorJitter, GaussianBlur, RandomErasing)",
           MIXING: "leave it out for such a store",
           BLENDING: "a pixel has one class, which cannot be blended; use CutMix (it pastes the partner's mask "
                     "with its pixels), or leave it out"}


def _listed(value) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]
