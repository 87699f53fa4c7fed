"""The trainer's optimizer, schedule, gradient clipping and weight average as timm spells them
on the command line, with timm's meaning and defaults (--opt, --sched, --warmup-lr, --min-lr,
--cooldown-epochs, --decay-epochs, --decay-milestones, --decay-rate, --clip-grad, --clip-mode,
--model-ema, --model-ema-decay). No torch here: these are TrainConfig's fields and their checks.
The schedule steps every optimizer step (timm's --sched-on-updates), its epochs fractional."""
from __future__ import annotations

from dataclasses import dataclass, field

from .choices import ClipMode, Opt, Sched
from .errors import TrainError

OPTIM = "model and schedule"


def _option(default, help: str, **cli):
    return field(default=default, metadata={"help": help, "group": OPTIM, **cli})


@dataclass
class OptimOptions:
    """The optimizer fields of TrainConfig (a base class, so the flags stay in one place)."""

    opt: Opt = _option(Opt.SGD, "optimizer, timm's names and meaning: sgd (Nesterov momentum), momentum "
                       "(classical momentum: torchvision's recipe), adam, adamw, lamb (timm's Lamb: trust "
                       "ratio, global grad-norm clip 1.0)")
    sched: Sched = _option(Sched.COSINE, "learning-rate schedule after the warmup, timm's: cosine (to --min-lr "
                           "at --epochs), step (times --decay-rate every --decay-epochs) or multistep (times "
                           "--decay-rate at each of --decay-milestones)")
    warmup_lr: float = _option(1e-5, "the warmup's first learning rate, rising linearly to the peak (timm's)",
                               metavar="LR")
    min_lr: float = _option(0.0, "--sched cosine: the learning rate it decays to (timm's)", metavar="LR")
    cooldown_epochs: int = _option(0, "--sched cosine: epochs at --min-lr after --epochs (timm's: the run is "
                                   "--epochs + N)", metavar="N")
    decay_epochs: float = _option(90.0, "--sched step: epochs between decays (timm's)", metavar="N")
    decay_milestones: tuple[int, ...] = _option((90, 180, 270), "--sched multistep: the epochs at which the "
                                                "rate decays (timm's)", metavar="EPOCH", nargs="+")
    decay_rate: float = _option(0.1, "--sched step and multistep: the factor of each decay (timm's)",
                                metavar="F", aliases=("--dr",))
    clip_grad: float | None = _option(None, "clip the gradients at this norm (or value, --clip-mode value) "
                                      "before each optimizer step (timm's; off when left out)", metavar="NORM")
    clip_mode: ClipMode = _option(ClipMode.NORM, "--clip-grad's mode, timm's: norm (of all gradients "
                                  "together) or value (each element)")
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
        for name in ("warmup_lr", "min_lr", "cooldown_epochs"):
            if getattr(self, name) < 0:
                raise TrainError(f"--{name.replace('_', '-')} must not be negative, got {getattr(self, name)}")
        if self.cooldown_epochs and self.sched is not Sched.COSINE:
            raise TrainError(f"--cooldown-epochs follows a cosine schedule (timm's); --sched {self.sched.value} "
                             "has none: leave it out or use --sched cosine")
        self.decay_milestones = tuple(int(m) for m in self.decay_milestones)
        if list(self.decay_milestones) != sorted(set(self.decay_milestones)) or min(self.decay_milestones, default=0) < 0:
            raise TrainError(f"--decay-milestones must be increasing epochs, got "
                             f"{' '.join(map(str, self.decay_milestones))}")
        if self.clip_grad is not None and not self.clip_grad > 0:
            raise TrainError(f"--clip-grad must be positive, got {self.clip_grad}")
        if self.opt is Opt.SGD and not self.momentum > 0:
            raise TrainError("--opt sgd is SGD with Nesterov momentum (timm's) and needs --momentum above 0; "
                             "for plain SGD use --opt momentum --momentum 0")

    @property
    def run_epochs(self) -> int:
        """The epochs the run trains: --epochs, and after a cosine decay its --cooldown-epochs."""
        return self.epochs + self.cooldown_epochs
