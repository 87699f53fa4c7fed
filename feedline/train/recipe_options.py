"""The trainer's augmentation recipe as timm spells it on the command line (--aa, --color-jitter,
--reprob, --mixup, --cutmix, --mixup-prob, --mixup-switch-prob) with progressive resizing and
the evaluation size. No torch here: these are TrainConfig's fields and their checks."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import TrainError

AUGMENT = "augmentation (timm's names)"


def _option(default, help: str, **cli):
    return field(default=default, metadata={"help": help, "group": AUGMENT, **cli})


def parse_aa(value: str | None) -> tuple[str, int, int] | None:
    """--aa: None/"none", "trivial", or timm's "rand-mM-nN" (either part may be left out:
    m9, n2) -> ("rand", num_ops, magnitude) or ("trivial", 0, 0)."""
    if value is None or value.lower() in ("", "none"):
        return None
    if value.lower() in ("trivial", "trivialaugment", "ta_wide"):
        return "trivial", 0, 0
    parts = value.lower().split("-")
    if parts[0] != "rand" or not all(re.fullmatch(r"[mn]\d+", p) for p in parts[1:]):
        raise TrainError(f"--aa {value!r}: expected 'rand-mM-nN' (e.g. rand-m9-n2: RandAugment with 2 ops at "
                            "magnitude 9, torchvision's), 'trivial' (TrivialAugmentWide) or 'none'; timm's "
                            "mstd/inc variants are not supported")
    found = {p[0]: int(p[1:]) for p in parts[1:]}
    return "rand", found.get("n", 2), found.get("m", 9)


@dataclass
class RecipeOptions:
    """The augmentation fields of TrainConfig (a base class, so the flags stay in one place)."""

    aa: str | None = _option(None, "per-sample auto-augmentation: rand-mM-nN (RandAugment, e.g. rand-m9-n2) "
                             "or trivial (TrivialAugmentWide)", metavar="POLICY")
    color_jitter: float = _option(0.0, "ColorJitter brightness, contrast and saturation factor (0: off)",
                                  metavar="F")
    reprob: float = _option(0.0, "RandomErasing probability per sample (0: off)", metavar="P")
    mixup: float = _option(0.0, "MixUp alpha (0: off); with mixing the loss takes soft targets", metavar="ALPHA")
    cutmix: float = _option(0.0, "CutMix alpha (0: off)", metavar="ALPHA")
    mixup_prob: float = _option(1.0, "probability of mixing a batch at all", metavar="P")
    mixup_switch_prob: float = _option(0.5, "with both --mixup and --cutmix: probability of CutMix for a batch",
                                       metavar="P")
    size_start: int | None = _option(None, "progressive resizing: train at this size first, then ramp linearly "
                                     "to --size over --size-ramp-epochs (FFCV's schedule)", metavar="PX")
    size_ramp_epochs: int = _option(0, "epochs of the ramp from --size-start to --size", metavar="N")
    eval_size: int | None = _option(None, "validation size; --size when left out", metavar="PX")

    def _check_recipe(self) -> None:
        parse_aa(self.aa)
        if not 0 <= self.label_smoothing < 1:
            raise TrainError(f"--label-smoothing must be in [0, 1), got {self.label_smoothing}")
        for name in ("color_jitter", "mixup", "cutmix"):
            if getattr(self, name) < 0:
                raise TrainError(f"--{name.replace('_', '-')} must not be negative, got {getattr(self, name)}")
        for name in ("reprob", "mixup_prob", "mixup_switch_prob"):
            if not 0 <= getattr(self, name) <= 1:
                raise TrainError(f"--{name.replace('_', '-')} is a probability: it must be in [0, 1], got "
                             f"{getattr(self, name)}")
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
