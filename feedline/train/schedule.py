"""Learning rate: linear warmup, then cosine decay to zero or step decay (times ``decay_rate``
every ``decay_steps``), as a pure function of the step."""
from __future__ import annotations

import math

import torch


def warmup_steps_for(warmup_epochs: float, steps_per_epoch: int, total_steps: int) -> int:
    """Warmup length in optimizer steps, capped at a fifth of the run so short runs still decay."""
    return min(int(round(warmup_epochs * steps_per_epoch)), total_steps // 5)


def lr_at(step: int, base_lr: float, warmup_steps: int, total_steps: int, kind: str = "cosine",
          decay_steps: int = 0, decay_rate: float = 0.1) -> float:
    """The learning rate of optimizer step ``step`` (0-based)."""
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    if kind == "step":
        return base_lr * decay_rate ** (step // max(decay_steps, 1))
    decay = max(total_steps - warmup_steps, 1)
    progress = min((step - warmup_steps) / decay, 1.0)
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * progress))


class WarmupSchedule:
    """Sets every param group's lr before each optimizer step. Plain floats: no host sync.
    ``kind`` "cosine" or "step" (then ``decay_steps`` and ``decay_rate``)."""

    def __init__(self, optimizer: torch.optim.Optimizer, base_lr: float, warmup_steps: int,
                 total_steps: int, kind: str = "cosine", decay_steps: int = 0, decay_rate: float = 0.1):
        self.optimizer = optimizer
        self.base_lr = base_lr
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.kind, self.decay_steps, self.decay_rate = kind, decay_steps, decay_rate
        self.step_count = 0
        self._apply()

    @property
    def lr(self) -> float:
        return lr_at(self.step_count, self.base_lr, self.warmup_steps, self.total_steps, self.kind,
                     self.decay_steps, self.decay_rate)

    def _apply(self) -> None:
        lr = self.lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def step(self) -> None:
        """Call after each optimizer step: sets the lr of the next one."""
        self.step_count += 1
        self._apply()

    def state_dict(self) -> dict:
        return {"step_count": self.step_count, "base_lr": self.base_lr,
                "warmup_steps": self.warmup_steps, "total_steps": self.total_steps, "kind": self.kind,
                "decay_steps": self.decay_steps, "decay_rate": self.decay_rate}

    def load_state_dict(self, state: dict) -> None:
        self.step_count = int(state["step_count"])
        self.base_lr = float(state["base_lr"])
        self.warmup_steps = int(state["warmup_steps"])
        self.total_steps = int(state["total_steps"])
        self.kind = state.get("kind", "cosine")
        self.decay_steps = int(state.get("decay_steps", 0))
        self.decay_rate = float(state.get("decay_rate", 0.1))
        self._apply()


WarmupCosine = WarmupSchedule  # the name before the step schedule
