"""The trainer's augmentation recipe as timm spells it on the command line, with timm's meaning
(--aa, --color-jitter, --reprob, --remode, --mixup, --cutmix, --mixup-prob, --mixup-switch-prob,
--mixup-mode) with progressive resizing and
the evaluation size. No torch here: these are TrainConfig's fields and their checks."""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import TrainError

AUGMENT = "augmentation (timm's names)"


def _option(default, help: str, **cli):
    return field(default=default, metadata={"help": help, "group": AUGMENT, **cli})


def parse_aa(value: str | None) -> tuple[str, str] | None:
    """--aa: None/"none", "trivial" (torchvision's TrivialAugmentWide), or a timm RandAugment
    string with timm's meaning ("rand-m9-mstd0.5-inc1") -> ("trivial", "") or ("rand", value)."""
    if value is None or value.lower() in ("", "none"):
        return None
    if value.lower() in ("trivial", "trivialaugment", "ta_wide"):
        return "trivial", ""
    from ..transforms.timm_policy import parse_rand   # here: building the parser imports no torch
    try:
        parse_rand(value)
    except ValueError as exc:
        raise TrainError(f"--aa {exc} (timm's meaning: m9 is level 9 of 10; or 'trivial' for "
                         f"TrivialAugmentWide, or 'none')") from None
    return "rand", value


@dataclass
class RecipeOptions:
    """The augmentation fields of TrainConfig (a base class, so the flags stay in one place)."""

    aa: str | None = _option(None, "per-sample auto-augmentation: a timm RandAugment string with timm's "
                             "meaning, rand-mM-nN[-mstdS][-mmaxX][-incI] (e.g. rand-m9-mstd0.5-inc1: magnitude "
                             "9 of 10, noise 0.5, each op with p=0.5), or trivial (torchvision's "
                             "TrivialAugmentWide)", metavar="POLICY")
    color_jitter: float = _option(0.4, "ColorJitter brightness, contrast and saturation factor, used only "
                                  "without --aa (timm's; 0: off)", metavar="F")
    reprob: float = _option(0.0, "random erasing probability per sample, timm's: a box of the normalized "
                            "image (0: off)", metavar="P")
    remode: str = _option("pixel", "what --reprob erases to, timm's modes: pixel (per-pixel normal noise in "
                          "normalized units), rand (one normal colour per box), const (0: the mean colour)",
                          metavar="pixel|rand|const")
    mixup: float = _option(0.0, "MixUp alpha (0: off); with mixing the loss takes soft targets", metavar="ALPHA")
    cutmix: float = _option(0.0, "CutMix alpha (0: off)", metavar="ALPHA")
    mixup_prob: float = _option(1.0, "probability of mixing a batch at all", metavar="P")
    mixup_switch_prob: float = _option(0.5, "with both --mixup and --cutmix: probability of CutMix for a batch",
                                       metavar="P")
    mixup_mode: str = _option("batch", "timm's Mixup mode: batch (one lambda per batch), pair (per pair of "
                              "samples i and n-1-i) or elem (per sample)", metavar="batch|pair|elem")
    size_start: int | None = _option(None, "progressive resizing: train at this size first, then ramp linearly "
                                     "to --size over --size-ramp-epochs (FFCV's schedule)", metavar="PX")
    size_ramp_epochs: int = _option(0, "epochs of the ramp from --size-start to --size", metavar="N")
    eval_size: int | None = _option(None, "validation size; --size when left out", metavar="PX")
    crop_pct: float = _option(0.875, "validation: resize the shorter side to size / crop-pct, then center-crop "
                              "(timm's --crop-pct; torchvision's 224/256)", metavar="F")

    def _check_recipe(self) -> None:
        parse_aa(self.aa)
        if self.mixup_mode not in ("batch", "pair", "elem"):
            raise TrainError(f"--mixup-mode must be batch, pair or elem (timm's), got {self.mixup_mode!r}")
        if self.remode not in ("pixel", "rand", "const"):
            raise TrainError(f"--remode must be pixel, rand or const (timm's), got {self.remode!r}")
        if not 0 <= self.label_smoothing < 1:
            raise TrainError(f"--label-smoothing must be in [0, 1), got {self.label_smoothing}")
        for name in ("color_jitter", "mixup", "cutmix"):
            if getattr(self, name) < 0:
                raise TrainError(f"--{name.replace('_', '-')} must not be negative, got {getattr(self, name)}")
        for name in ("reprob", "mixup_prob", "mixup_switch_prob"):
            if not 0 <= getattr(self, name) <= 1:
                raise TrainError(f"--{name.replace('_', '-')} is a probability: it must be in [0, 1], got "
                             f"{getattr(self, name)}")
        if not 0 < self.crop_pct <= 1:
            raise TrainError(f"--crop-pct must be in (0, 1], got {self.crop_pct}")
        for name in ("size_start", "eval_size"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise TrainError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.size_ramp_epochs < 0:
            raise TrainError(f"--size-ramp-epochs must not be negative, got {self.size_ramp_epochs}")
        if self.size_start is not None and self.size_ramp_epochs == 0:
            raise TrainError("--size-start needs --size-ramp-epochs N (the epochs of the ramp to --size)")

    @property
    def mixing(self) -> bool:
        return self.mixup > 0 or self.cutmix > 0
