"""Random tensors already on the device: the model's throughput ceiling, with no data pipeline."""
from __future__ import annotations

import copy

import torch
from torch import nn

from ..core.stats import LoaderStats
from .config import TrainConfig
from .distributed import DistInfo
from .loop import Progress, train_epoch
from .report import Reporter
from .result import TrainResult, finish
from .setup import WARMUP_MICRO, build_runner
from .step import Amp


class SyntheticLoader:
    """Yields the same pre-made batch ``steps`` times; quacks like FeedLoader for the loop
    (its ``stats`` count no wait: the batch is already there)."""

    def __init__(self, batch_size: int, size: int, num_classes: int, steps: int,
                 device: torch.device, dtype: torch.dtype = torch.float32,
                 channels_last: bool = True, seed: int = 0, per_pixel: bool = False):
        """``per_pixel``: a class per pixel (a segmentation model's targets), else per image."""
        gen = torch.Generator().manual_seed(seed)
        images = torch.randn(batch_size, 3, size, size, generator=gen).to(device=device, dtype=dtype)
        if channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        self.images = images
        shape = (batch_size, size, size) if per_pixel else (batch_size,)
        self.labels = torch.randint(0, num_classes, shape, generator=gen).to(device)
        self.steps = steps
        self.stats = LoaderStats()

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        self.stats = LoaderStats()
        return self._batches()

    def _batches(self):
        for _ in range(self.steps):
            yield self.images, self.labels

    def set_epoch(self, epoch: int) -> None:
        pass

    def close(self) -> None:
        pass


def measure_synthetic(raw: nn.Module, cfg: TrainConfig, info: DistInfo, amp: Amp, lr: float,
                      num_classes: int, dtype: torch.dtype, criterion: nn.Module | None = None,
                      per_pixel: bool = False) -> float | None:
    """Images/s per rank of the same model, step and options on random tensors already on the
    device, trained on a copy (the trained weights stay untouched): the model's ceiling. The
    run's ``criterion`` (classification when None); ``per_pixel``: its targets are masks.
    Collective when distributed: every rank must call it."""
    steps = cfg.synthetic_steps
    runner = build_runner(copy.deepcopy(raw), cfg, info, amp, lr, 0, max(steps, 1), criterion)
    loader = SyntheticLoader(cfg.batch_size, cfg.size, num_classes, steps, info.device, dtype,
                             cfg.channels_last, cfg.seed, per_pixel)
    er = train_epoch(runner, loader, Progress(), accum_steps=cfg.accum_steps, device=info.device,
                     log_every=max(steps, 1), warmup_micro=min(WARMUP_MICRO, steps - 1))
    return er.timed_images / er.timed_s if er.timed_s > 0 else None


def run_synthetic_only(raw: nn.Module, cfg: TrainConfig, info: DistInfo, amp: Amp, lr: float,
                       num_classes: int, dtype: torch.dtype, reporter: Reporter,
                       result: TrainResult) -> TrainResult:
    """--synthetic: the model's throughput ceiling, no data set read, no checkpoint."""
    reporter.info("synthetic run: %s, %d classes, batch %d x %d ranks, %dx%d, amp %s, %d steps on %s",
                  cfg.arch, num_classes, cfg.batch_size, info.world_size, cfg.size, cfg.size, amp.name,
                  cfg.synthetic_steps, info.device)
    reporter.event("start", config=cfg.to_dict(), world_size=info.world_size, device=str(info.device),
                   amp=amp.name, lr=lr, synthetic=True, num_classes=num_classes)
    runner = build_runner(raw, cfg, info, amp, lr, 0, cfg.synthetic_steps)
    loader = SyntheticLoader(cfg.batch_size, cfg.size, num_classes, cfg.synthetic_steps, info.device,
                             dtype, cfg.channels_last, cfg.seed)
    progress = Progress()
    er = train_epoch(runner, loader, progress, accum_steps=cfg.accum_steps, device=info.device,
                     log_every=cfg.log_every, on_log=lambda w: reporter.window(w, (cfg.size, cfg.size)),
                     warmup_micro=min(WARMUP_MICRO, cfg.synthetic_steps - 1))
    result.steps = progress.step
    result.synthetic_images_per_s = er.timed_images / er.timed_s if er.timed_s > 0 else None
    if result.synthetic_images_per_s:
        reporter.info("synthetic ceiling: %s img/s per rank, %s img/s in all",
                      f"{result.synthetic_images_per_s:,.0f}",
                      f"{result.synthetic_images_per_s * info.world_size:,.0f}")
    finish(result, raw, info, reporter)
    return result
