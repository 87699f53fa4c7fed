"""The two training paths that only the two-process DDP tests touched (issue 23, item 7), pinned
in one process on the CPU:

- the gradient scaler exists if and only if fp16 is asked for (--autocast fp16 or timm's --amp), and it scales every
  micro-step's loss, then steps and updates once per optimizer step (torch.amp.GradScaler
  has a CPU implementation: the scale doubling at each clean update counts the updates);
- with k accumulation steps over n micro-batches the optimizer and the schedule step n/k
  times, and the weights equal those of one full-batch step per group.

Real images (a sample folder read by FeedLoader), the real StepRunner, train_epoch,
optimizer and schedule."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from feedline import FeedLoader
from feedline.sample import make_photo_folder
from feedline.train.config import TrainConfig
from feedline.train.distributed import DistInfo
from feedline.train.loop import Progress, train_epoch
from feedline.train.setup import build_runner, resolve_amp
from feedline.train.step import Amp, StepRunner, make_optimizer
from feedline.train.schedule import WarmupCosine

SIZE = 32
MICRO = 4          # images per micro-batch
N_MICRO = 6        # micro-batches in the epoch


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("train_step")
    make_photo_folder(str(root), n=MICRO * N_MICRO, classes=3, seed=2, sizes=[(64, 48), (48, 64)],
                      photo_per_class=True)
    return str(root)


def loader(folder: str, batch_size: int) -> FeedLoader:
    """The same images in the same order for any batch size: no shuffle, center crops."""
    return FeedLoader(folder, batch_size=batch_size, size=SIZE, train=False, device="cpu", num_workers=1)


def no_bn_net(seed: int = 0) -> nn.Module:
    """A small CNN without BatchNorm: its gradient over a batch is the mean of the
    micro-batches' gradients, as accumulation assumes (BatchNorm's batch statistics are not)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3))


class Counting:
    """Counts optimizer steps with the optimizer's own post-step hook."""

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.steps = 0
        optimizer.register_step_post_hook(lambda *_: self._count())

    def _count(self) -> None:
        self.steps += 1


def run_epoch(runner: StepRunner, folder: str, batch_size: int, accum_steps: int):
    return train_epoch(runner, loader(folder, batch_size), Progress(), accum_steps=accum_steps,
                       device=torch.device("cpu"), log_every=1000)


@pytest.mark.parametrize("flags, scaled", [({"autocast": "fp16"}, True), ({"autocast": "bf16"}, False),
                                           ({"autocast": "off"}, False), ({"autocast": "auto"}, False),
                                           ({"amp": True}, True), ({"amp": True, "amp_dtype": "bfloat16"}, False)])
def test_the_scaler_exists_if_and_only_if_fp16_is_asked_for(flags, scaled):
    cfg = TrainConfig(synthetic=True, device="cpu", arch="tiny", **flags)
    mode = resolve_amp(cfg.precision, torch.device("cpu"))
    runner = build_runner(no_bn_net(), cfg, DistInfo(), mode, lr=0.1, warmup_steps=0, total_steps=10)
    assert isinstance(runner.scaler, torch.amp.GradScaler) is scaled
    assert (mode.dtype is torch.float16) is scaled


@pytest.mark.parametrize("accum_steps", [1, 2, 3, 4])
def test_the_scaler_scales_every_micro_step_and_steps_and_updates_once_per_optimizer_step(folder, accum_steps):
    cfg = TrainConfig(synthetic=True, amp=True, device="cpu", arch="tiny", accum_steps=accum_steps)
    runner = build_runner(no_bn_net(), cfg, DistInfo(), Amp("cpu", torch.float16), lr=0.01, warmup_steps=0,
                          total_steps=N_MICRO)
    scaler = runner.scaler
    # Start low and double after every update without inf/NaN: the scale counts the updates.
    scaler.load_state_dict({**scaler.state_dict(), "scale": 8.0, "growth_interval": 1, "_growth_tracker": 0})
    scaled, steps = [], []
    real_scale, real_step = scaler.scale, scaler.step

    def scale(loss):
        scaled.append(float(loss.detach()))
        return real_scale(loss)

    def step(optimizer, *args, **kw):
        steps.append(scaler.get_scale())
        return real_step(optimizer, *args, **kw)

    scaler.scale, scaler.step = scale, step
    counting = Counting(runner.optimizer)
    result = run_epoch(runner, folder, MICRO, accum_steps)
    optimizer_steps = -(-N_MICRO // accum_steps)
    assert result.micro_done == N_MICRO and len(scaled) == N_MICRO
    assert len(steps) == counting.steps == optimizer_steps
    assert steps == [8.0 * 2 ** k for k in range(optimizer_steps)]     # one update between steps
    assert scaler.get_scale() == 8.0 * 2 ** optimizer_steps            # and one after the last
    assert runner.scheduler.step_count == optimizer_steps


@pytest.mark.parametrize("k", [2, 3])
def test_k_accumulation_steps_step_n_over_k_times_and_equal_full_batch_steps(folder, k):
    lr, n_steps = 0.05, N_MICRO // k
    runs = {}
    for name, batch, accum in (("accumulated", MICRO, k), ("full", MICRO * k, 1)):
        net = no_bn_net()
        optimizer = make_optimizer(net, lr, momentum=0.9, weight_decay=1e-3)
        scheduler = WarmupCosine(optimizer, lr, warmup_steps=1, total_steps=n_steps)
        runner = StepRunner(net, None, optimizer, scheduler, None, nn.CrossEntropyLoss(), Amp("cpu", None))
        counting = Counting(optimizer)
        before = copy.deepcopy(net.state_dict())
        progress_steps = run_epoch(runner, folder, batch, accum)
        runs[name] = (net.state_dict(), counting.steps, scheduler.step_count, before, progress_steps)
    accumulated, full = runs["accumulated"], runs["full"]
    assert accumulated[1] == full[1] == n_steps            # optimizer steps: n / k, not n
    assert accumulated[2] == full[2] == n_steps            # schedule steps alike
    for key, value in accumulated[0].items():
        assert not torch.equal(value, accumulated[3][key])                 # it did train
        torch.testing.assert_close(value, full[0][key], rtol=1e-5, atol=1e-6)
