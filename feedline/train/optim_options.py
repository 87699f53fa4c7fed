"""The trainer's optimizer, schedule and weight average as timm spells them on the command line
(--opt, --sched, --decay-epochs, --decay-rate, --model-ema, --model-ema-decay). No torch here:
these are TrainConfig's fields and their checks."""
from __future__ import annotations

from dataclasses import dataclass, field

from .choices import Opt, Sched
from .errors import TrainError

OPTIM = "model and schedule"


def _option(default, help: str, **cli):
    return field(default=default, metadata={"help": help, "group": OPTIM, **cli})


@dataclass
class OptimOptions:
    """The optimizer fields of TrainConfig (a base class, so the flags stay in one place)."""

    opt: Opt = _option(Opt.SGD, "optimizer, timm's names: sgd (with --momentum), adamw or lamb (timm's Lamb: "
                       "trust ratio, global grad-norm clip 1.0)")
    sched: Sched = _option(Sched.COSINE, "learning-rate schedule after the warmup, timm's names: cosine (decay "
                           "to zero) or step (times --decay-rate every --decay-epochs)")
    decay_epochs: float = _option(30.0, "--sched step: epochs between decays (torchvision's reference "
                                  "recipe: 30)", metavar="N")
    decay_rate: float = _option(0.1, "--sched step: the factor of each decay (torchvision's reference "
                                "recipe: 0.1)", metavar="F")
    model_ema: bool = _option(False, "also keep an exponential moving average of the weights (timm's "
                              "--model-ema), validated beside the model and saved in the checkpoint")
    model_ema_decay: float = _option(0.9998, "the EMA's decay per optimizer step (timm's default)",
                                     metavar="D")

    def _check_optim(self) -> None:
        if not self.decay_epochs > 0:
            raise TrainError(f"--decay-epochs must be positive, got {self.decay_epochs}")
        if self.decay_rate < 0:
            raise TrainError(f"--decay-rate must not be negative, got {self.decay_rate}")
        if not 0 <= self.model_ema_decay < 1:
            raise TrainError(f"--model-ema-decay must be in [0, 1), got {self.model_ema_decay}")
