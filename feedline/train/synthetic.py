"""Random tensors already on the device: the model's throughput ceiling, with no data pipeline."""
from __future__ import annotations

import copy

import torch
from torch import nn

from .config import TrainConfig
from .distributed import DistInfo
from .loop import Amp, Progress, train_epoch
from .setup import WARMUP_MICRO, build_runner


class SyntheticLoader:
    """Yields the same pre-made batch ``steps`` times; quacks like FeedLoader for the loop."""

    stats = None

    def __init__(self, batch_size: int, size: int, num_classes: int, steps: int,
                 device: torch.device, dtype: torch.dtype = torch.float32,
                 channels_last: bool = True, seed: int = 0):
        gen = torch.Generator().manual_seed(seed)
        images = torch.randn(batch_size, 3, size, size, generator=gen).to(device=device, dtype=dtype)
        if channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        self.images = images
        self.labels = torch.randint(0, num_classes, (batch_size,), generator=gen).to(device)
        self.steps = steps

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        for _ in range(self.steps):
            yield self.images, self.labels

    def set_epoch(self, epoch: int) -> None:
        pass

    def close(self) -> None:
        pass


def measure_synthetic(raw: nn.Module, cfg: TrainConfig, info: DistInfo, amp: Amp, lr: float,
                      num_classes: int, dtype: torch.dtype) -> float | None:
    """Images/s per rank of the same model, step and options on random tensors already on the
    device, trained on a copy (the trained weights stay untouched): the model's ceiling.
    Collective when distributed: every rank must call it."""
    steps = cfg.synthetic_steps
    runner = build_runner(copy.deepcopy(raw), cfg, info, amp, lr, 0, max(steps, 1))
    loader = SyntheticLoader(cfg.batch_size, cfg.size, num_classes, steps, info.device, dtype,
                             cfg.channels_last, cfg.seed)
    er = train_epoch(runner, loader, Progress(), accum_steps=cfg.accum_steps, device=info.device,
                     log_every=max(steps, 1), warmup_micro=min(WARMUP_MICRO, steps - 1))
    return er.timed_images / er.timed_s if er.timed_s > 0 else None
