"""FeedLoader's options, validated once when built."""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from .augment import AugmentSpec
from .pipeline.plan import IMAGENET_MEAN, IMAGENET_STD, OutputSpec

ON_ERROR = ("raise", "substitute")


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass(frozen=True)
class LoaderConfig:
    batch_size: int = 256
    shuffle: bool = False
    drop_last: bool = False
    seed: int = 0
    num_threads: int = 1
    prefetch: int = 2
    decoder: str = "auto"
    on_error: str = "raise"
    augment: AugmentSpec = AugmentSpec()
    output: OutputSpec = OutputSpec()
    rank: int = 0
    world_size: int = 1

    def __post_init__(self):
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {self.batch_size!r}")
        if not isinstance(self.num_threads, int) or self.num_threads < 1:
            raise ValueError(f"num_threads must be a positive int or 'auto', got {self.num_threads!r}")
        if self.prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {self.prefetch}")
        if self.on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {self.on_error!r}")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is not in 0..{self.world_size - 1}")


def build_output(mean, std, dtype, channels_last: bool, device) -> OutputSpec:
    device = str(torch.device(device if device is not None else default_device()))
    if device.startswith("cuda") and not torch.cuda.is_available():
        from .errors import BackendUnavailable
        raise BackendUnavailable(f"device={device!r} but CUDA is not available; use device='cpu'")
    if device == "cuda":
        device = f"cuda:{torch.cuda.current_device()}"
    if mean is None:
        if dtype not in (None, torch.uint8):
            raise ValueError("mean=None gives uint8 images; leave dtype unset or pass torch.uint8")
        return OutputSpec(None, None, torch.uint8, channels_last, device)
    if std is None:
        raise ValueError("std is required when mean is given")
    mean, std = tuple(float(m) for m in mean), tuple(float(s) for s in std)
    if len(mean) != 3 or len(std) != 3 or min(std) <= 0:
        raise ValueError(f"mean and std need 3 values each, std > 0; got {mean}, {std}")
    dtype = dtype or torch.float32
    if not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating point torch.dtype with mean/std, got {dtype}")
    return OutputSpec(mean, std, dtype, channels_last, device)


def distributed_position(rank, world_size) -> tuple[int, int]:
    """(rank, world_size): given, else from torch.distributed when initialized, else (0, 1)."""
    if rank is None and world_size is None:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
        return 0, 1
    if rank is None or world_size is None:
        raise ValueError("give both rank and world_size, or neither")
    return int(rank), int(world_size)


__all__ = ["LoaderConfig", "build_output", "distributed_position", "usable_cores", "default_device",
           "IMAGENET_MEAN", "IMAGENET_STD"]
