"""FeedLoader's options, validated once when built: what to load (LoaderConfig) and what
the consumer receives (OutputSpec)."""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import torch

from .augment import AugmentSpec
from .choices import DecoderName, OnError, Order
from .errors import BackendUnavailable

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class OutputSpec:
    """What the consumer receives: N x C x H x W, normalized (or uint8 when mean is None)."""

    mean: tuple[float, float, float] | None = IMAGENET_MEAN  # on the 0..1 scale, as torchvision
    std: tuple[float, float, float] | None = IMAGENET_STD
    dtype: torch.dtype | None = None  # float32 when None (uint8 when mean is None)
    channels_last: bool = True
    device: str = "cpu"

    @property
    def on_cuda(self) -> bool:
        return self.device.startswith("cuda")


@dataclass(frozen=True)
class LoaderConfig:
    """Everything a FeedLoader does, resolved: no "auto" left, every value checked."""

    batch_size: int = 256
    order: Order = Order.SEQUENTIAL
    drop_last: bool = False
    seed: int = 0
    num_threads: int = 1
    prefetch: int = 2
    decoder: DecoderName = DecoderName.NVIMGCODEC
    on_error: OnError = OnError.RAISE
    augment: AugmentSpec = AugmentSpec()
    output: OutputSpec = OutputSpec()
    rank: int = 0
    world_size: int = 1
    even_shards: bool = True    # pad by wrapping so every rank gets as many samples (training)
    quasi_random: tuple[int, int] = (16, 256)  # order='quasi-random': records per block, blocks per window
    pin_memory: bool = False    # page-locked batch buffers (always on a CUDA device)

    def __post_init__(self):
        set_ = object.__setattr__  # frozen: normalize the fields once, here
        set_(self, "order", Order.parse(self.order, "order"))
        set_(self, "decoder", DecoderName.parse(self.decoder, "decoder"))
        set_(self, "on_error", OnError.parse(self.on_error, "on_error"))
        for name in ("batch_size", "num_threads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if isinstance(self.prefetch, bool) or not isinstance(self.prefetch, int) or self.prefetch < 1:
            raise ValueError(f"prefetch must be an int >= 1 (batches prepared ahead), got {self.prefetch!r}")
        block, window = self.quasi_random
        if min(block, window) < 1:
            raise ValueError(f"quasi_random must be (records per block, blocks per window), both >= 1, "
                             f"got {self.quasi_random!r}")
        if not isinstance(self.seed, int):
            raise ValueError(f"seed must be an int, got {self.seed!r}")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is not in 0..{self.world_size - 1}")

    @property
    def shuffle(self) -> bool:
        return self.order is not Order.SEQUENTIAL


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def choose_order(shuffle: bool, order) -> Order:
    """``order`` when given, else DataLoader's meaning of ``shuffle``."""
    if order is None:
        return Order.RANDOM if shuffle else Order.SEQUENTIAL
    order = Order.parse(order, "order")
    if not shuffle and order is not Order.SEQUENTIAL:
        raise ValueError(f"order={order.value!r} shuffles; pass shuffle=True with it (or leave order unset)")
    return order


def choose_threads(num_threads, num_workers) -> int:
    """Decode threads: ``num_threads``, DataLoader's ``num_workers`` when threads are "auto",
    else one per usable core."""
    if num_threads == "auto":
        return max(1, int(num_workers)) if num_workers is not None else usable_cores()
    return num_threads


def choose_pinning(pin_memory) -> bool:
    """DataLoader's ``pin_memory``: page-locked buffers need an accelerator; without one,
    DataLoader warns and leaves memory pageable, and so does FeedLoader."""
    if not pin_memory:
        return False
    if not torch.cuda.is_available():
        warnings.warn("pin_memory=True but no CUDA device is available: batches stay in pageable "
                      "memory", stacklevel=3)
        return False
    return True


def build_output(mean, std, dtype, channels_last: bool, device) -> OutputSpec:
    device = str(torch.device(device if device is not None else default_device()))
    if device.startswith("cuda") and not torch.cuda.is_available():
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
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
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


__all__ = ["LoaderConfig", "OutputSpec", "build_output", "choose_order", "choose_threads", "choose_pinning",
           "distributed_position", "usable_cores", "default_device", "IMAGENET_MEAN", "IMAGENET_STD"]
