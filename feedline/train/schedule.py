"""Learning rate: linear warmup, then cosine decay to zero, as a pure function of the step."""
from __future__ import annotations

import math

import torch


def warmup_steps_for(warmup_epochs: float, steps_per_epoch: int, total_steps: int) -> int:
    """Warmup length in optimizer steps, capped at a fifth of the run so short runs still decay."""
    return min(int(round(warmup_epochs * steps_per_epoch)), total_steps // 5)


def lr_at(step: int, base_lr: float, warmup_steps: int, total_steps: int) -> float:
    """The learning rate of optimizer step ``step`` (0-based)."""
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    decay = max(total_steps - warmup_steps, 1)
    progress = min((step - warmup_steps) / decay, 1.0)
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * progress))


class WarmupCosine:
    """Sets every param group's lr before each optimizer step. Plain floats: no host sync."""

    def __init__(self, optimizer: torch.optim.Optimizer, base_lr: float, warmup_steps: int,
                 total_steps: int):
        self.optimizer = optimizer
        self.base_lr = base_lr
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.step_count = 0
        self._apply()

    @property
    def lr(self) -> float:
        return lr_at(self.step_count, self.base_lr, self.warmup_steps, self.total_steps)

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
                "warmup_steps": self.warmup_steps, "total_steps": self.total_steps}

    def load_state_dict(self, state: dict) -> None:
        self.step_count = int(state["step_count"])
        self.base_lr = float(state["base_lr"])
        self.warmup_steps = int(state["warmup_steps"])
        self.total_steps = int(state["total_steps"])
        self._apply()
