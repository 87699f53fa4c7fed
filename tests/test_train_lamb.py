"""feedline/train/lamb.py and the optimizer set-up (step.make_optimizer): several parameter
groups, each with its own weight decay. Lamb's trust ratio scales the update of a group that
decays and of no other; the gradient clip is one norm over every group; a zero weight or a zero
update leaves the ratio at 1; a parameter without a gradient is left alone; state survives a
checkpoint. Every expected value is Adam's moments written out by hand."""
from __future__ import annotations

import copy

import pytest
import torch

from feedline.train.lamb import Lamb
from feedline.train.step import make_optimizer

LR, WD, EPS = 0.1, 0.01, 1e-6


def adam_direction(grads: list[torch.Tensor], betas=(0.9, 0.999)) -> torch.Tensor:
    """Adam's bias-corrected m / (sqrt(v) + eps) after the gradients ``grads``, one per step."""
    m = v = torch.zeros_like(grads[0])
    for g in grads:
        m, v = betas[0] * m + (1 - betas[0]) * g, betas[1] * v + (1 - betas[1]) * g * g
    t = len(grads)
    return (m / (1 - betas[0] ** t)) / ((v / (1 - betas[1] ** t)).sqrt() + EPS)


def tensors(*rows):
    return [torch.tensor(r, dtype=torch.float32) for r in rows]


def test_the_trust_ratio_scales_the_decaying_group_only_and_the_clip_spans_both_groups():
    w0, b0 = tensors([[1.0, -2.0], [0.5, 3.0]], [0.5, -0.25])
    gw, gb = tensors([[3.0, 0.0], [0.0, 0.0]], [0.0, -4.0])     # global norm 5: both divided by 5
    w, b = w0.clone().requires_grad_(), b0.clone().requires_grad_()
    w.grad, b.grad = gw.clone(), gb.clone()
    Lamb([{"params": [w], "weight_decay": WD}, {"params": [b], "weight_decay": 0.0}], lr=LR).step()
    u = adam_direction([gw / 5]) + WD * w0
    assert torch.allclose(w.detach(), w0 - LR * (w0.norm() / u.norm()) * u, atol=1e-6)
    assert torch.allclose(b.detach(), b0 - LR * adam_direction([gb / 5]), atol=1e-6)   # no ratio
    # Had the bias group's update been scaled, it would have moved by ||b|| / ||u|| = 0.559 / 1.0 of this.
    assert not torch.allclose(b.detach(), b0 - LR * (b0.norm() / adam_direction([gb / 5]).norm())
                              * adam_direction([gb / 5]), atol=1e-3)


def test_two_steps_of_each_group_with_its_bias_correction():
    w0, b0 = tensors([[2.0, 0.0], [0.0, 1.0]], [1.0, 1.0])
    gw = tensors([[0.1, 0.2], [0.0, -0.1]], [[0.05, -0.2], [0.1, 0.0]])
    gb = tensors([0.3, 0.0], [-0.1, 0.2])
    w, b = w0.clone().requires_grad_(), b0.clone().requires_grad_()
    opt = Lamb([{"params": [w], "weight_decay": WD}, {"params": [b], "weight_decay": 0.0}], lr=LR)
    want_w, want_b = w0.clone(), b0.clone()
    for t in (1, 2):   # gradient norms below 1: no clipping
        w.grad, b.grad = gw[t - 1].clone(), gb[t - 1].clone()
        opt.step()
        u = adam_direction(gw[:t]) + WD * want_w
        want_w = want_w - LR * (want_w.norm() / u.norm()) * u
        want_b = want_b - LR * adam_direction(gb[:t])
    assert torch.allclose(w.detach(), want_w, atol=1e-6) and torch.allclose(b.detach(), want_b, atol=1e-6)
    assert opt.state[w]["step"] == opt.state[b]["step"] == 2


@pytest.mark.parametrize("norm, divided_by", [(0.6, 1.0), (1.0, 1.0), (2.5, 2.5)])
def test_the_gradient_clip_at_its_bound(norm, divided_by):
    """A global norm at or under 1.0 is not clipped; above, every gradient is divided by it."""
    w0 = torch.tensor([1.0, 1.0])
    g = torch.tensor([0.6, 0.8]) * norm
    w = w0.clone().requires_grad_()
    w.grad = g.clone()
    Lamb([{"params": [w], "weight_decay": 0.0}], lr=LR).step()
    assert torch.allclose(w.detach(), w0 - LR * adam_direction([g / divided_by]), atol=1e-6)


def test_no_clip_when_max_grad_norm_is_none():
    w = torch.tensor([1.0, 1.0], requires_grad=True)
    w.grad = torch.tensor([30.0, 40.0])
    Lamb([w], lr=LR, weight_decay=0.0, max_grad_norm=None).step()
    # Adam's first step is the gradient's sign whatever its size; its second moment tells the scale.
    assert torch.allclose(w.detach(), torch.tensor([1.0, 1.0]) - LR * adam_direction([torch.tensor([30.0, 40.0])]))


def test_a_zero_weight_or_a_zero_update_leaves_the_ratio_at_one():
    zero = torch.zeros(2, requires_grad=True)           # ||w|| = 0: the update is not scaled to nothing
    zero.grad = torch.tensor([0.3, -0.4])
    still = torch.zeros(2, requires_grad=True)          # ||w|| = ||update|| = 0: no NaN
    still.grad = torch.zeros(2)
    Lamb([{"params": [zero, still], "weight_decay": WD}], lr=LR).step()
    assert torch.allclose(zero.detach(), -LR * adam_direction([torch.tensor([0.3, -0.4])]), atol=1e-6)
    assert torch.equal(still.detach(), torch.zeros(2))


def test_a_parameter_without_a_gradient_is_left_alone():
    w, idle = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    w.grad = torch.tensor([0.1, 0.0])
    opt = Lamb([{"params": [w], "weight_decay": 0.0}, {"params": [idle], "weight_decay": WD}], lr=LR)
    opt.step()
    assert torch.equal(idle.detach(), torch.ones(2)) and idle not in opt.state
    empty = Lamb([torch.ones(1, requires_grad=True)])
    assert empty.step(lambda: torch.tensor(7.0)) == 7.0   # nothing to update: the closure's loss


def test_lamb_resumed_from_its_state_dict_continues_as_if_never_stopped():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    x = torch.randn(8, 3)

    def steps(model, opt, n):
        for _ in range(n):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
    whole = copy.deepcopy(net)
    steps(whole, make_optimizer(whole, LR, 0.9, WD, "lamb"), 3)
    first = make_optimizer(net, LR, 0.9, WD, "lamb")
    steps(net, first, 2)
    resumed = copy.deepcopy(net)
    again = make_optimizer(resumed, LR, 0.9, WD, "lamb")
    again.load_state_dict(copy.deepcopy(first.state_dict()))
    steps(resumed, again, 1)
    for a, b in zip(whole.parameters(), resumed.parameters()):
        assert torch.equal(a, b)


def net_and_grads():
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                              torch.nn.Linear(4, 2))
    net[0].bias.requires_grad_(False)   # frozen: in no group
    return net


def test_make_optimizer_decays_weights_not_biases_or_batchnorm_and_skips_frozen_ones():
    net = net_and_grads()
    for name in ("sgd", "adamw", "lamb"):
        opt = make_optimizer(net, LR, 0.9, WD, name)
        decay, no_decay = opt.param_groups
        assert [p.shape for p in decay["params"]] == [(4, 3, 3, 3), (2, 4)] and decay["weight_decay"] == WD
        assert [p.shape for p in no_decay["params"]] == [(4,), (4,), (2,)] and no_decay["weight_decay"] == 0.0
        assert all(g["lr"] == LR for g in opt.param_groups)


@pytest.mark.parametrize("name, shrink", [("sgd", 1 - LR * WD), ("adamw", 1 - LR * WD), ("lamb", 1 - LR)])
def test_with_zero_gradients_only_the_decaying_group_shrinks(name, shrink):
    """SGD and AdamW shrink a decaying weight by lr x wd; Lamb's trust ratio rescales its update
    wd x w to ||w||, so it shrinks by lr; biases and BatchNorm do not move."""
    net = net_and_grads()
    before = [p.detach().clone() for p in net.parameters()]
    opt = make_optimizer(net, LR, 0.9, WD, name)
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    for p, p0 in zip(net.parameters(), before):
        decays = p.requires_grad and p.ndim > 1
        assert torch.allclose(p.detach(), p0 * shrink if decays else p0, atol=1e-7), (name, tuple(p.shape))


def test_the_schedule_sets_the_rate_of_every_group():
    from feedline.train.schedule import WarmupSchedule
    opt = make_optimizer(net_and_grads(), LR, 0.9, WD, "lamb")
    schedule = WarmupSchedule(opt, LR, warmup_steps=4, total_steps=20)
    assert [g["lr"] for g in opt.param_groups] == [LR / 4, LR / 4]
    for _ in range(3):
        schedule.step()
    assert [g["lr"] for g in opt.param_groups] == [LR, LR]
