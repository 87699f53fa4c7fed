"""One training step: forward under autocast, backward, and every ``accum_steps`` micro-steps
the optimizer step (timm's optimizers by name; no weight decay on BatchNorm parameters and
biases), after clipping the gradients when asked, then the EMA of the weights when asked."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Amp:
    """Autocast settings: ``dtype`` None means full float32."""

    device_type: str
    dtype: torch.dtype | None

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    @property
    def name(self) -> str:
        return {None: "off", torch.bfloat16: "bf16", torch.float16: "fp16"}[self.dtype]


@dataclass(frozen=True)
class GradClip:
    """timm's --clip-grad and --clip-mode: the gradients' global L2 norm at most ``limit``
    ("norm"), or each element within [-limit, limit] ("value")."""

    limit: float
    mode: str = "norm"

    def __call__(self, parameters) -> None:
        if self.mode == "value":
            torch.nn.utils.clip_grad_value_(parameters, self.limit)
        else:
            torch.nn.utils.clip_grad_norm_(parameters, self.limit)


def make_optimizer(model: nn.Module, lr: float, momentum: float, weight_decay: float,
                   opt: str = "sgd") -> torch.optim.Optimizer:
    """timm's --opt: sgd (Nesterov momentum), momentum (classical momentum), adam, adamw or lamb;
    no weight decay on BatchNorm parameters and biases (1-d tensors), which only shrinks them
    without regularizing the function (timm's filter_bias_and_bn)."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (no_decay if p.ndim <= 1 else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    if opt == "adamw":
        return torch.optim.AdamW(groups, lr=lr)
    if opt == "adam":
        return torch.optim.Adam(groups, lr=lr)
    if opt == "lamb":
        from .lamb import Lamb
        return Lamb(groups, lr=lr)
    return torch.optim.SGD(groups, lr=lr, momentum=momentum, nesterov=opt == "sgd")


class StepRunner:
    """One micro-step: forward under autocast, backward, and on the last micro-step of an
    accumulation group the optimizer step. DDP's all-reduce is skipped (``no_sync``) on
    micro-steps that do not step, so accumulation costs one all-reduce per step."""

    def __init__(self, net: nn.Module, ddp: nn.Module | None, optimizer: torch.optim.Optimizer,
                 scheduler, scaler: torch.amp.GradScaler | None, criterion: nn.Module, amp: Amp,
                 ema=None, raw: nn.Module | None = None, clip: GradClip | None = None):
        self.net = net            # what to call: possibly compiled, possibly DDP
        self.ddp = ddp            # the DDP module, for no_sync; None in one process
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.scaler = scaler
        self.criterion = criterion
        self.amp = amp
        self.ema = ema            # a ModelEma of ``raw`` (the unwrapped model), updated after each step
        self.raw = raw
        self.clip = clip          # applied to the unscaled gradients before each optimizer step
        self.last_lr = optimizer.param_groups[0]["lr"]  # of the latest optimizer step

    def micro_step(self, images: torch.Tensor, labels: torch.Tensor, group_size: int,
                   step_now: bool) -> torch.Tensor:
        """Returns the (unscaled, detached) mean loss of the micro-batch, still on the device."""
        no_sync = self.ddp.no_sync() if self.ddp is not None and not step_now else contextlib.nullcontext()
        with no_sync:
            with self.amp.autocast():
                loss = self.criterion(self.net(images), labels)
            scaled = loss / group_size if group_size > 1 else loss
            if self.scaler is not None:
                self.scaler.scale(scaled).backward()
            else:
                scaled.backward()
        if step_now:
            self.last_lr = self.optimizer.param_groups[0]["lr"]
            if self.clip is not None:
                if self.scaler is not None:
                    self.scaler.unscale_(self.optimizer)   # clip what the step will apply, as timm's NativeScaler
                self.clip([p for group in self.optimizer.param_groups for p in group["params"]])
            if self.scaler is not None:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.scheduler.step()
            if self.ema is not None:
                self.ema.update(self.raw)
        return loss.detach()
