"""An exponential moving average of the model's weights (timm's --model-ema, ModelEmaV3
without warmup): after each optimizer step, ema = decay * ema + (1 - decay) * weights for
floating-point tensors; integer buffers (BatchNorm's batch count) are copied."""
from __future__ import annotations

import copy

import torch
from torch import nn


class ModelEma:
    def __init__(self, model: nn.Module, decay: float):
        self.decay = float(decay)
        self.module = copy.deepcopy(model).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        for ema, now in zip(self.module.state_dict().values(), model.state_dict().values()):
            if ema.is_floating_point():
                ema.lerp_(now.to(ema.dtype), 1.0 - self.decay)
            else:
                ema.copy_(now)

    def state_dict(self) -> dict:
        return self.module.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.module.load_state_dict(state)
