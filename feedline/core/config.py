"""FeedLoader's options, validated once when built: what to load (LoaderConfig), what the
consumer receives (OutputSpec), what runs beyond the crop (TransformSpec), which samples in
which order (OrderSpec). How FeedLoader's keywords become them: keywords.py."""
from __future__ import annotations

import math
import operator
import os
from dataclasses import dataclass, replace

import torch

from ..planning.augment import AugmentSpec
from .choices import Engine, OnError, Order
from .errors import BackendUnavailable
from ..planning.size_schedule import SizeSchedule

MASK_DTYPES = (torch.int64, torch.int32, torch.int16, torch.uint8)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class Unset:
    """The value of a keyword left out, where None has a meaning of its own (mean=None)."""

    def __repr__(self) -> str:
        return "<default>"


UNSET = Unset()


@dataclass(frozen=True)
class OutputSpec:
    """What the consumer receives: N x C x H x W, normalized (or uint8 when mean is None).

    Checked and resolved when built: ``dtype`` is always a torch.dtype afterwards (float32
    with ``mean``, uint8 without). ``device=None`` is FeedLoader's ``device=``, else CUDA
    when it is usable; LoaderConfig resolves it."""

    mean: tuple[float, float, float] | None = IMAGENET_MEAN  # on the 0..1 scale, as torchvision
    std: tuple[float, float, float] | None = IMAGENET_STD
    dtype: torch.dtype | None = None  # float32 when None (uint8 when mean is None)
    # None: channels_last on CUDA (what convolutions there want), contiguous on the CPU, where
    # a consumer's ``x.view(n, -1)`` must work; resolved with the device.
    channels_last: bool | None = None
    device: str | None = None
    mask_dtype: torch.dtype = torch.int64   # segmentation masks (N x H x W class indices): int64, int32, int16, uint8

    def __post_init__(self):
        set_ = object.__setattr__  # frozen: normalize the fields once, here
        if self.mask_dtype not in MASK_DTYPES:
            raise TypeError(f"mask_dtype must be one of {', '.join(map(str, MASK_DTYPES))} (class indices), "
                            f"got {self.mask_dtype!r}")
        if self.device is not None:
            set_(self, "device", str(torch.device(self.device)))
            if self.channels_last is None:
                set_(self, "channels_last", self.device.startswith("cuda"))
        if self.mean is None:
            if self.dtype not in (None, torch.uint8):
                raise ValueError("mean=None gives uint8 images; leave dtype unset or pass torch.uint8")
            set_(self, "std", None)
            set_(self, "dtype", torch.uint8)
            return
        if self.std is None:
            raise ValueError("std is required when mean is given")
        mean, std = tuple(float(m) for m in self.mean), tuple(float(s) for s in self.std)
        if len(mean) != 3 or len(std) != 3 or min(std) <= 0:
            raise ValueError(f"mean and std need 3 values each, std > 0; got {mean}, {std}")
        dtype = torch.float32 if self.dtype is None else self.dtype
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating point torch.dtype with mean/std, got {dtype}")
        set_(self, "mean", mean)
        set_(self, "std", std)
        set_(self, "dtype", dtype)

    @property
    def on_cuda(self) -> bool:
        return self.device is not None and self.device.startswith("cuda")


@dataclass(frozen=True)
class TransformSpec:
    """What runs beyond the crop and flip: ``transforms`` per sample (built-ins from
    feedline.transforms, their names, or callables ``fn(image, rng)``), in order;
    ``batch_transforms`` on the finished batch (mixers or callables ``fn(images, targets)``).
    ``num_classes``: for mixers that lack it; the store's class count when None."""

    transforms: tuple = ()
    batch_transforms: tuple = ()
    num_classes: int | None = None

    def __post_init__(self):
        for name in ("transforms", "batch_transforms"):
            value = getattr(self, name)
            if value is None:
                value = ()
            if not isinstance(value, (list, tuple)):
                raise TypeError(f"{name}= takes a list of transforms, got {type(value).__name__}")
            object.__setattr__(self, name, tuple(value))

    def __bool__(self) -> bool:
        return bool(self.transforms or self.batch_transforms)


@dataclass(frozen=True)
class OrderSpec:
    """Which samples this rank reads, and in which order. ``order``: "sequential", "random",
    "quasi-random" or "shards" (None: DataLoader's ``shuffle`` decides; "shards" for a bucket); ``quasi_random``: records per
    block and blocks per window of that order; ``rank``/``world_size``: this process's share
    (from torch.distributed when initialized, else the whole data set, when left out);
    ``even_shards``: pad by wrapping so every rank gets as many samples (training)."""

    order: Order | str | None = None
    quasi_random: tuple[int, int] = (16, 256)
    rank: int | None = None
    world_size: int | None = None
    even_shards: bool = True

    def __post_init__(self):
        if self.order is not None:
            object.__setattr__(self, "order", Order.parse(self.order, "order"))
        object.__setattr__(self, "quasi_random", tuple(self.quasi_random))


@dataclass(frozen=True)
class LoaderConfig:
    """Everything a FeedLoader does, resolved: no "auto" left, every value checked."""

    batch_size: int = 256
    order: Order = Order.SEQUENTIAL
    drop_last: bool = False
    seed: int = 0
    num_workers: int = 1        # the CPU engine's worker processes (or threads); DALI's and nvImageCodec's threads
    prefetch: int = 2
    engine: Engine = Engine.THREADS
    decoder: str | None = "nvimgcodec"   # the CPU engine's decoder (its registered name); None otherwise
    on_error: OnError = OnError.RAISE
    augment: AugmentSpec = AugmentSpec()
    output: OutputSpec = OutputSpec()
    rank: int = 0
    world_size: int = 1
    even_shards: bool = True    # pad by wrapping so every rank gets as many samples (training)
    quasi_random: tuple[int, int] = (16, 256)  # order='quasi-random': records per block, blocks per window
    pin_memory: bool = False    # page-locked batch buffers (always on a CUDA device)
    transforms: TransformSpec = TransformSpec()
    size_schedule: SizeSchedule | None = None   # size per epoch; augment.size is epoch 0's
    timeout: float = 0.0        # seconds the workers may take to answer for the due batch; 0: forever
    region_decode: bool | None = None   # GPU engines: decode only the crop's region (None: where known safe)

    def spec_at(self, epoch: int) -> AugmentSpec:
        """The crop and flip of ``epoch``: ``augment`` at the schedule's size for that epoch."""
        if self.size_schedule is None:
            return self.augment
        return replace(self.augment, size=self.size_schedule.at(epoch))

    def largest_size(self) -> tuple[int, int]:
        """The largest size the size schedule reaches, when it can say (``sizes()``, as
        ProgressiveSize has), else ``augment.size``: what the memory check must allow for."""
        sizes = self.size_schedule.known_sizes() if self.size_schedule is not None else None
        return max(sizes, key=lambda s: s[0] * s[1]) if sizes else self.augment.size

    def __post_init__(self):
        set_ = object.__setattr__  # frozen: normalize the fields once, here
        set_(self, "order", Order.parse(self.order, "order"))
        set_(self, "engine", Engine.parse(self.engine, "engine"))
        set_(self, "on_error", OnError.parse(self.on_error, "on_error"))
        if self.engine is Engine.AUTO:
            raise ValueError("LoaderConfig takes a resolved engine (threads, dali or gpu), not 'auto'")
        if (self.engine in (Engine.THREADS, Engine.PROCESSES)) != isinstance(self.decoder, str):
            raise ValueError(f"engine={self.engine.value!r} with decoder={self.decoder!r}: the CPU engine "
                             "names its decoder, dali and gpu have none")
        set_(self, "output", replace(self.output, device=resolve_device(self.output.device)))
        for name in ("batch_size", "num_workers"):
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
        check_position(self.rank, self.world_size)
        check_timeout(self.timeout, self.engine)


def check_timeout(timeout, engine: Engine) -> None:
    """DataLoader's ``timeout``, for worker processes only: a stuck process can be stopped, a
    stuck decode thread (or a DALI or GPU call) cannot, so the other engines refuse it."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout < math.inf:
        raise ValueError(f"timeout must be a number of seconds >= 0 (0: wait forever), got {timeout!r}")
    if timeout and engine is not Engine.PROCESSES:
        raise ValueError(f"timeout={timeout!r} needs engine='processes': a worker process stuck past it is "
                         f"stopped, but engine={engine.value!r} works on threads of this process, which "
                         "cannot be stopped; pass engine='processes', or leave timeout at 0")


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device(device) -> str:
    """A concrete device: ``device``, else CUDA when usable; "cuda" names its index."""
    device = str(torch.device(device if device is not None else default_device()))
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise BackendUnavailable(f"device={device!r} but CUDA is not available; use device='cpu'")
    if device == "cuda":
        device = f"cuda:{torch.cuda.current_device()}"
    return device


def check_position(rank, world_size) -> tuple[int, int]:
    """(rank, world_size) as ints, or a ValueError saying what is wrong."""
    for name, value in (("rank", rank), ("world_size", world_size)):
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise ValueError(f"{name} must be an int, got {value!r}")
    rank, world_size = operator.index(rank), operator.index(world_size)
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1 (the number of ranks), got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in 0..{world_size - 1} (world_size={world_size}): each of the "
                         "world_size ranks passes its own rank, 0 to world_size - 1")
    return rank, world_size


def distributed_position(rank, world_size) -> tuple[int, int]:
    """(rank, world_size): given, else from torch.distributed when initialized, else (0, 1)."""
    if rank is None and world_size is None:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
        return 0, 1
    if rank is None or world_size is None:
        raise ValueError("give both rank and world_size, or neither")
    return check_position(rank, world_size)


__all__ = ["LoaderConfig", "OrderSpec", "OutputSpec", "TransformSpec", "UNSET", "check_position", "distributed_position", "resolve_device", "usable_cores",
           "default_device", "IMAGENET_MEAN", "IMAGENET_STD"]
