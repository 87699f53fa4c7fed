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
MOMENTUM = 0.9
SHRUNK = {   # a decaying weight p after one step with a zero gradient (its decay term: wd x p)
    "sgd": lambda p: p * (1 - LR * WD * (1 + MOMENTUM)),      # Nesterov: the decay term and momentum x it
    "momentum": lambda p: p * (1 - LR * WD),
    "adamw": lambda p: p * (1 - LR * WD),                       # decoupled; Adam's own step is 0
    "adam": lambda p: p - LR * (WD * p) / ((WD * p).abs() + 1e-8),   # coupled: Adam's first step on wd x p
    "lamb": lambda p: p * (1 - LR),                             # the trust ratio rescales wd x p to ||p||
}


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


def test_timms_defaults():
    opt = Lamb([torch.ones(1, requires_grad=True)])
    assert opt.defaults == dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01, max_grad_norm=1.0)


@pytest.mark.parametrize("max_norm, first, divided_by", [(2.0, 1.2, 1.0), (2.0, 2.0, 1.0), (2.0, 5.0, 2.5),
                                                         (None, 5.0, 1.0)])
def test_the_gradient_clip_at_its_bound(max_norm, first, divided_by):
    """A global norm at or under max_grad_norm is not clipped; above, every gradient is divided
    by norm / max_grad_norm. Adam's first step is the sign of the gradient whatever its scale,
    so the clip shows in the second step, whose gradient (norm 0.5) is not clipped."""
    w0 = torch.tensor([1.0, 1.0])
    g1, g2 = torch.tensor([0.6, 0.8]) * first, torch.tensor([-0.3, 0.4])
    w = w0.clone().requires_grad_()
    opt = Lamb([{"params": [w], "weight_decay": 0.0}], lr=LR, max_grad_norm=max_norm)
    for g in (g1, g2):
        w.grad = g.clone()
        opt.step()
    want = w0 - LR * adam_direction([g1 / divided_by]) - LR * adam_direction([g1 / divided_by, g2])
    assert torch.allclose(w.detach(), want, atol=1e-6)


def test_a_zero_weight_or_a_zero_update_leaves_the_ratio_at_one():
    zero = torch.zeros(2, requires_grad=True)           # ||w|| = 0: the update is not scaled to nothing
    zero.grad = torch.tensor([0.3, -0.4])
    still = torch.zeros(2, requires_grad=True)          # ||w|| = ||update|| = 0: no NaN
    still.grad = torch.zeros(2)
    Lamb([{"params": [zero, still], "weight_decay": WD}], lr=LR).step()
    assert torch.allclose(zero.detach(), -LR * adam_direction([torch.tensor([0.3, -0.4])]), atol=1e-6)
    assert torch.equal(still.detach(), torch.zeros(2))
    # ||update|| = 0 beside ||w|| = 1: Adam's first direction, exactly +1 for a gradient of 1024
    # (eps is below its float32 step), cancelled by a weight decay of -1. The ratio stays 1, not 1/0.
    one = torch.ones(1, requires_grad=True)
    one.grad = torch.full((1,), 1024.0)
    Lamb([{"params": [one], "weight_decay": -1.0}], lr=LR, max_grad_norm=None).step()
    assert torch.equal(one.detach(), torch.ones(1))


def test_a_bfloat16_parameter_keeps_float32_moments():
    w0, g = torch.tensor([1.0, -2.0, 0.5]), torch.tensor([0.25, -0.5, 0.125])
    low, full = w0.to(torch.bfloat16).requires_grad_(), w0.clone().requires_grad_()
    low.grad, full.grad = g.to(torch.bfloat16), g.clone()
    opts = [Lamb([{"params": [p], "weight_decay": WD}], lr=LR) for p in (low, full)]
    for opt in opts:
        opt.step()
    state = opts[0].state[low]
    assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == torch.float32 and low.dtype == torch.bfloat16
    assert torch.equal(state["exp_avg"], opts[1].state[full]["exp_avg"])   # bf16 holds these gradients exactly
    assert torch.allclose(low.detach().float(), full.detach(), rtol=2 ** -7)   # to bf16's precision


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
    for name in SHRUNK:
        opt = make_optimizer(net, LR, MOMENTUM, WD, name)
        decay, no_decay = opt.param_groups
        assert [p.shape for p in decay["params"]] == [(4, 3, 3, 3), (2, 4)] and decay["weight_decay"] == WD
        assert [p.shape for p in no_decay["params"]] == [(4,), (4,), (2,)] and no_decay["weight_decay"] == 0.0
        assert all(g["lr"] == LR for g in opt.param_groups)


@pytest.mark.parametrize("name", sorted(SHRUNK))
def test_with_zero_gradients_only_the_decaying_group_moves(name):
    """Biases and BatchNorm (the group without weight decay) do not move; each optimizer moves
    the decaying weights as its update of the decay term alone says."""
    net = net_and_grads()
    before = [p.detach().clone() for p in net.parameters()]
    opt = make_optimizer(net, LR, MOMENTUM, WD, name)
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    for p, p0 in zip(net.parameters(), before):
        decays = p.requires_grad and p.ndim > 1
        assert torch.allclose(p.detach(), SHRUNK[name](p0) if decays else p0, atol=1e-7), (name, tuple(p.shape))


def test_the_schedule_sets_the_rate_of_every_group():
    from feedline.train.schedule import WarmupSchedule, lr_at
    opt = make_optimizer(net_and_grads(), LR, MOMENTUM, WD, "lamb")
    schedule = WarmupSchedule(opt, LR, warmup_steps=4, total_steps=20, warmup_lr=0.02)
    for step in range(6):
        assert [g["lr"] for g in opt.param_groups] == [lr_at(step, LR, 4, 20, warmup_lr=0.02)] * 2
        schedule.step()
    assert opt.param_groups[0]["lr"] not in (0.02, LR)   # warmed up, then decaying
