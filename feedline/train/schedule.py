"""Learning rate as timm's schedulers compute it, stepped every optimizer step (timm's
--sched-on-updates), as a pure function of the step: a linear warmup from ``warmup_lr``, then
cosine decay to ``min_lr`` over the whole run (the warmup's steps counted, as timm's
CosineLRScheduler without warmup_prefix) and ``min_lr`` after it (the cooldown), or step decay
(times ``decay_rate`` every ``decay_steps``), or multistep (times ``decay_rate`` at each milestone)."""
from __future__ import annotations

import bisect
import math
from dataclasses import asdict, dataclass, field

import torch


def warmup_steps_for(warmup_epochs: float, steps_per_epoch: int) -> int:
    """Warmup length in optimizer steps, as asked: never shortened (timm's)."""
    return int(round(warmup_epochs * steps_per_epoch))


@dataclass
class Schedule:
    """The learning rate of every optimizer step. ``total_steps``: the decay's span (--epochs);
    ``decay_steps`` (step) and ``milestones`` (multistep) in optimizer steps."""

    base_lr: float
    warmup_steps: int
    total_steps: int
    kind: str = "cosine"
    decay_steps: int = 0
    decay_rate: float = 0.1
    warmup_lr: float = 0.0
    min_lr: float = 0.0
    milestones: tuple[int, ...] = field(default=())

    def lr(self, step: int) -> float:
        """The learning rate of optimizer step ``step`` (0-based)."""
        if step < self.warmup_steps:
            return self.warmup_lr + step * (self.base_lr - self.warmup_lr) / self.warmup_steps
        if self.kind == "step":
            return self.base_lr * self.decay_rate ** (step // max(self.decay_steps, 1))
        if self.kind == "multistep":
            return self.base_lr * self.decay_rate ** bisect.bisect_right(self.milestones, step)
        if step >= self.total_steps:
            return self.min_lr
        return self.min_lr + 0.5 * (self.base_lr - self.min_lr) * (1.0 + math.cos(math.pi * step / self.total_steps))


def lr_at(step: int, base_lr: float, warmup_steps: int, total_steps: int, kind: str = "cosine",
          decay_steps: int = 0, decay_rate: float = 0.1, **timm) -> float:
    """The learning rate of optimizer step ``step`` (0-based); ``timm``: warmup_lr, min_lr, milestones."""
    return Schedule(base_lr, warmup_steps, total_steps, kind, decay_steps, decay_rate, **timm).lr(step)


class WarmupSchedule:
    """Sets every param group's lr before each optimizer step. Plain floats: no host sync.
    The keywords are Schedule's."""

    def __init__(self, optimizer: torch.optim.Optimizer, base_lr: float, warmup_steps: int,
                 total_steps: int, kind: str = "cosine", decay_steps: int = 0, decay_rate: float = 0.1, **timm):
        self.optimizer = optimizer
        self.schedule = Schedule(base_lr, warmup_steps, total_steps, kind, decay_steps, decay_rate, **timm)
        self.step_count = 0
        self._apply()

    @property
    def lr(self) -> float:
        return self.schedule.lr(self.step_count)

    @property
    def warmup_steps(self) -> int:
        return self.schedule.warmup_steps

    def _apply(self) -> None:
        lr = self.lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def step(self) -> None:
        """Call after each optimizer step: sets the lr of the next one."""
        self.step_count += 1
        self._apply()

    def state_dict(self) -> dict:
        return {"step_count": self.step_count, **asdict(self.schedule), "milestones": list(self.schedule.milestones)}

    def load_state_dict(self, state: dict) -> None:
        """A state saved before warmup_lr, min_lr and milestones existed warms up from 0."""
        self.step_count = int(state["step_count"])
        self.schedule = Schedule(
            float(state["base_lr"]), int(state["warmup_steps"]), int(state["total_steps"]), state.get("kind", "cosine"),
            int(state.get("decay_steps", 0)), float(state.get("decay_rate", 0.1)), float(state.get("warmup_lr", 0.0)),
            float(state.get("min_lr", 0.0)), tuple(int(m) for m in state.get("milestones", ())))
        self._apply()


WarmupCosine = WarmupSchedule  # the name before the step schedule
