"""Lamb (You et al., "Large Batch Optimization for Deep Learning"), as timm's Lamb computes it
with its defaults: Adam's bias-corrected moments, weight decay added to the update, the
update scaled by ||w|| / ||update|| (where both are non-zero and the group decays), and the
gradients first clipped to a global norm of ``max_grad_norm``. torch has no Lamb of its own."""
from __future__ import annotations

import torch


class Lamb(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.01, max_grad_norm: float | None = 1.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      max_grad_norm=max_grad_norm))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        if not grads:
            return loss
        clip = self._clip(grads)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, group, clip)
        return loss

    # The two parts of a step are plain methods (step's no_grad covers them), so that each can
    # be read, and mutated, on its own.
    def _clip(self, grads: list[torch.Tensor]) -> torch.Tensor:
        """What every gradient is divided by: the global norm over all groups / max_grad_norm,
        at least 1."""
        max_norm = self.defaults["max_grad_norm"]
        if max_norm is None:
            return torch.ones((), device=grads[0].device)
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))
        return torch.clamp(norm / max_norm, min=1.0)

    def _update(self, p: torch.Tensor, group: dict, clip: torch.Tensor) -> None:
        beta1, beta2 = group["betas"]
        grad = p.grad.float() / clip
        state = self.state[p]
        if not state:
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
        state["step"] += 1
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m.mul_(beta1).add_(grad, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = (v / (1 - beta2 ** state["step"])).sqrt_().add_(group["eps"])
        update = (m / (1 - beta1 ** state["step"])) / denom
        if group["weight_decay"] != 0:   # only a decaying group adapts its step (timm: always_adapt=False)
            update.add_(p.float(), alpha=group["weight_decay"])
            w_norm, u_norm = p.float().norm(), update.norm()
            ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
            update.mul_(ratio)
        p.add_(update.to(p.dtype), alpha=-group["lr"])
