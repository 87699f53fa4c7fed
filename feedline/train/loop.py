"""The hot loop: micro-steps with gradient accumulation and the meters around them.

Nothing in the loop reads a value back from the device except at a log step: the loss
is summed on the device and read every ``log_every`` optimizer steps, so the CPU runs
ahead of the GPU and the loader's prefetch has time to work. The time spent waiting for
data is the loader's own measure (``loader.stats.wait_s``: the consumer's time inside
``next``), read at the same moments.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from .step import StepRunner


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Window:
    """What a log line reports: the optimizer steps since the previous log line."""

    epoch: int
    step: int              # optimizer steps done in the whole run
    micro: int             # micro-batches done in this epoch
    micro_total: int
    loss: float
    lr: float
    images_per_s: float    # this rank
    step_s: float
    data_wait: float       # fraction of the window's time spent waiting for the loader
    gpu_mem_gib: float | None


@dataclass
class EpochResult:
    loss_sum: torch.Tensor          # on the device, summed over samples of this rank
    samples: int
    micro_done: int                 # micro-batches done in this epoch (less than len when stopped)
    images: int                     # images trained on in this call (not counting a resumed part)
    stopped: bool                   # a hook asked to stop (max steps)
    timed_images: int = 0           # throughput, after the warm-up micro-steps
    timed_s: float = 0.0
    wait_s: float = 0.0             # the loader's wait in this call
    elapsed_s: float = 0.0


@dataclass
class Progress:
    """Where the run stands; advanced by ``train_epoch`` and saved in checkpoints."""

    epoch: int = 0
    micro: int = 0          # micro-batches done in ``epoch``
    step: int = 0           # optimizer steps done in the run
    loss_sum: float = 0.0   # of ``epoch`` so far (restored on a mid-epoch resume)
    samples: int = 0


class _WindowMeter:
    """Loss, images, steps and data wait since the last log line; the loss stays on the device."""

    def __init__(self, device: torch.device, stats):
        self.device, self.stats = device, stats
        self.loss = torch.zeros((), dtype=torch.float64, device=device)
        self.samples = self.steps = 0
        self.t0, self.wait0 = time.perf_counter(), stats.wait_s

    def close(self, progress: Progress, micro_total: int, lr: float) -> Window:
        loss = self.loss.item() / max(self.samples, 1)  # the only sync of the loop
        now, wait = time.perf_counter(), self.stats.wait_s
        seconds = max(now - self.t0, 1e-9)
        cuda = self.device.type == "cuda"
        mem = torch.cuda.max_memory_allocated(self.device) / 2**30 if cuda else None
        window = Window(progress.epoch, progress.step, progress.micro, micro_total, loss, lr,
                        self.samples / seconds, seconds / max(self.steps, 1),
                        min((wait - self.wait0) / seconds, 1.0), mem)
        if cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        self.loss.zero_()
        self.samples = self.steps = 0
        self.t0, self.wait0 = now, wait
        return window


def train_epoch(runner: StepRunner, loader, progress: Progress, *, accum_steps: int,
                device: torch.device, log_every: int,
                on_log: Callable[[Window], None] | None = None,
                on_step: Callable[[Progress, Callable[[], float]], bool] | None = None,
                on_micro: Callable[[int], None] | None = None,
                warmup_micro: int = 0, log_first: bool = False) -> EpochResult:
    """Run the rest of epoch ``progress.epoch`` from micro-batch ``progress.micro``.

    ``on_log(window)`` runs every ``log_every`` optimizer steps, and after the first step of
    this call with ``log_first`` (an early sign of life in a log file).
    ``on_step(progress, read_loss_sum)`` runs after each optimizer step and returns True to stop;
    ``read_loss_sum()`` syncs and returns the epoch's summed loss so far (for checkpoints).
    ``warmup_micro`` micro-steps (compilation, cudnn autotuning) are left out of the throughput.
    """
    runner.net.train()
    n = len(loader)
    start = micro = progress.micro
    samples0 = progress.samples
    loss_sum = torch.full((), progress.loss_sum, dtype=torch.float64, device=device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    it = iter(loader)
    stats = loader.stats  # the loader starts fresh counters for each iteration
    window = _WindowMeter(device, stats)
    t_epoch = time.perf_counter()
    timed_t0 = t_epoch if warmup_micro <= 0 else None
    timed_images, steps_here, stopped = 0, 0, False
    try:
        while micro < n:
            try:
                images, labels = next(it)
            except StopIteration:
                break
            group_start = micro - micro % accum_steps
            group_size = min(accum_steps, n - group_start)
            step_now = micro == group_start + group_size - 1
            weighted = runner.micro_step(images, labels, group_size, step_now).double() * images.shape[0]
            loss_sum += weighted
            window.loss += weighted
            window.samples += images.shape[0]
            progress.samples += images.shape[0]
            micro += 1
            if timed_t0 is not None:
                timed_images += images.shape[0]
            elif micro - start >= warmup_micro:
                _sync(device)  # once per run: start the throughput clock on an idle device
                timed_t0 = time.perf_counter()
            if on_micro is not None:
                on_micro(1)
            if not step_now:
                continue
            progress.step += 1
            progress.micro = micro
            window.steps += 1
            steps_here += 1
            if on_log is not None and (progress.step % log_every == 0 or (log_first and steps_here == 1)):
                on_log(window.close(progress, n, runner.last_lr))
            if on_step is not None and on_step(progress, loss_sum.item):
                stopped = True
                break
    finally:
        if micro < n:
            it.close()  # stops the loader's work for the rest of the epoch
    _sync(device)
    end = time.perf_counter()
    progress.micro = micro
    result = EpochResult(loss_sum, progress.samples, micro, progress.samples - samples0, stopped,
                         wait_s=stats.wait_s, elapsed_s=end - t_epoch)
    if timed_t0 is not None and timed_images:
        result.timed_images, result.timed_s = timed_images, end - timed_t0
    return result
