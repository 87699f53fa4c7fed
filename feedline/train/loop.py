"""The hot loop: micro-steps with gradient accumulation, evaluation, and the meters around them.

Nothing in the loop reads a value back from the device except at a log step: the loss
is summed on the device and read every ``log_every`` optimizer steps, so the CPU runs
ahead of the GPU and the loader's prefetch has time to work.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .distributed import DistInfo, all_reduce_sum


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


def make_optimizer(model: nn.Module, lr: float, momentum: float, weight_decay: float) -> torch.optim.SGD:
    """SGD with momentum; no weight decay on BatchNorm parameters and biases (1-d tensors),
    which only shrinks them without regularizing the function."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (no_decay if p.ndim <= 1 else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.SGD(groups, lr=lr, momentum=momentum)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class StepRunner:
    """One micro-step: forward under autocast, backward, and on the last micro-step of an
    accumulation group the optimizer step. DDP's all-reduce is skipped (``no_sync``) on
    micro-steps that do not step, so accumulation costs one all-reduce per step."""

    def __init__(self, net: nn.Module, ddp: nn.Module | None, optimizer: torch.optim.Optimizer,
                 scheduler, scaler: torch.amp.GradScaler | None, criterion: nn.Module, amp: Amp):
        self.net = net            # what to call: possibly compiled, possibly DDP
        self.ddp = ddp            # the DDP module, for no_sync; None in one process
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.scaler = scaler
        self.criterion = criterion
        self.amp = amp
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
            if self.scaler is not None:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.scheduler.step()
        return loss.detach()


class _WaitClock:
    """Seconds the consumer spent inside the loader's ``next``: everything the data
    pipeline costs the training thread (blocked on decode threads, copies, normalization)."""

    def __init__(self):
        self.total = 0.0

    def next(self, it):
        t0 = time.perf_counter()
        try:
            return next(it)
        finally:
            self.total += time.perf_counter() - t0


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
    data_wait: float       # fraction of the window's time blocked on the loader
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
    wait_s: float = 0.0
    elapsed_s: float = 0.0


@dataclass
class Progress:
    """Where the run stands; advanced by ``train_epoch`` and saved in checkpoints."""

    epoch: int = 0
    micro: int = 0          # micro-batches done in ``epoch``
    step: int = 0           # optimizer steps done in the run
    loss_sum: float = 0.0   # of ``epoch`` so far (restored on a mid-epoch resume)
    samples: int = 0


def train_epoch(runner: StepRunner, loader, progress: Progress, *, accum_steps: int,
                device: torch.device, log_every: int,
                on_log: Callable[[Window], None] | None = None,
                on_step: Callable[[Progress, Callable[[], float]], bool] | None = None,
                on_micro: Callable[[int], None] | None = None,
                warmup_micro: int = 0) -> EpochResult:
    """Run the rest of epoch ``progress.epoch`` from micro-batch ``progress.micro``.

    ``on_step(progress, read_loss_sum)`` runs after each optimizer step and returns True to stop;
    ``read_loss_sum()`` syncs and returns the epoch's summed loss so far (for checkpoints).
    ``warmup_micro`` micro-steps (compilation, cudnn autotuning) are left out of the throughput.
    """
    runner.net.train()
    n = len(loader)
    start = progress.micro
    loss_sum = torch.full((), progress.loss_sum, dtype=torch.float64, device=device)
    samples = progress_samples0 = progress.samples
    win_loss = torch.zeros((), dtype=torch.float64, device=device)
    win_samples = win_steps = 0
    clock = _WaitClock()
    win_wait0 = 0.0
    t_epoch = win_t0 = time.perf_counter()
    timed_t0, timed_images = None, 0
    if warmup_micro <= 0:
        timed_t0 = t_epoch
    stopped = False
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    it = iter(loader)
    micro = start
    try:
        while micro < n:
            try:
                images, labels = clock.next(it)
            except StopIteration:
                break
            group_start = micro - micro % accum_steps
            group_size = min(accum_steps, n - group_start)
            step_now = micro == group_start + group_size - 1
            loss = runner.micro_step(images, labels, group_size, step_now)
            batch = labels.shape[0]
            weighted = loss.double() * batch
            loss_sum += weighted
            win_loss += weighted
            samples += batch
            win_samples += batch
            micro += 1
            if timed_t0 is not None:
                timed_images += batch
            elif micro - start >= warmup_micro:
                _sync(device)  # once per run: start the throughput clock on an idle device
                timed_t0 = time.perf_counter()
            if on_micro is not None:
                on_micro(1)
            if not step_now:
                continue
            progress.step += 1
            progress.micro = micro
            win_steps += 1
            if on_log is not None and progress.step % log_every == 0:
                lr = runner.last_lr
                window_loss = win_loss.item() / max(win_samples, 1)  # the only sync of the loop
                now = time.perf_counter()
                wait = clock.total
                seconds = max(now - win_t0, 1e-9)
                mem = (torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None)
                on_log(Window(progress.epoch, progress.step, micro, n, window_loss, lr,
                              win_samples / seconds, seconds / win_steps,
                              min((wait - win_wait0) / seconds, 1.0), mem))
                win_loss.zero_()
                win_samples = win_steps = 0
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                win_t0, win_wait0 = now, wait
            if on_step is not None:
                progress.samples = samples
                if on_step(progress, loss_sum.item):
                    stopped = True
                    break
    finally:
        close = getattr(it, "close", None)
        if close is not None and micro < n:
            close()
    _sync(device)
    end = time.perf_counter()
    progress.micro = micro
    progress.samples = samples
    result = EpochResult(loss_sum, samples, micro, samples - progress_samples0, stopped, wait_s=clock.total,
                         elapsed_s=end - t_epoch)
    if timed_t0 is not None and timed_images:
        result.timed_images, result.timed_s = timed_images, end - timed_t0
    return result


def evaluate(model: nn.Module, loader, amp: Amp, device: torch.device, info: DistInfo,
             num_classes: int) -> dict:
    """Loss, top-1 and top-5 accuracy over ``loader``, summed over ranks. Counts stay on the
    device until the end; ``inference_mode`` skips autograd's bookkeeping entirely."""
    model.eval()
    k = min(5, num_classes)
    totals = torch.zeros(4, dtype=torch.float64, device=device)  # loss, top1, top5, samples
    with torch.inference_mode():
        for images, labels in loader:
            with amp.autocast():
                logits = model(images)
            logits = logits.float()
            hits = logits.topk(k, dim=1).indices.eq(labels[:, None])
            totals += torch.stack([F.cross_entropy(logits, labels, reduction="sum").double(),
                                   hits[:, :1].sum().double(), hits.sum().double(),
                                   torch.full((), labels.shape[0], dtype=torch.float64, device=device)])
    model.train()
    totals = all_reduce_sum(totals.clone(), info)
    loss, top1, topk, count = totals.tolist()
    count = max(count, 1.0)
    return {"val_loss": loss / count, "top1": top1 / count, "top5": topk / count,
            "val_images": int(count)}
