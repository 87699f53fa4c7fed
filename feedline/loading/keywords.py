"""How FeedLoader's keywords become a LoaderConfig's specs: each option group given one way
(the spec, or its loose keywords), DataLoader's keywords mapped or answered with feedline's
way, the keywords that moved into a spec refused with a TypeError that says where they went
(kept for one release), and per-sample callables checked for feedline's ``fn(image, rng)``."""
from __future__ import annotations

import functools
import inspect
import os
from dataclasses import replace
import warnings

import torch

from ..planning.augment import AugmentSpec
from ..core.choices import Order
from ..core.config import UNSET, OrderSpec, OutputSpec, TransformSpec, resolve_device, usable_cores

# keyword -> where it is given now
MOVED = {
    "scale": "augment=AugmentSpec(scale=...)",
    "ratio": "augment=AugmentSpec(ratio=...)",
    "crop_fraction": "augment=AugmentSpec(crop_fraction=...)",
    "flip": "augment=AugmentSpec(flip=...)",
    "min_box_visibility": "augment=AugmentSpec(min_box_visibility=...)",
    "channels_last": "output=OutputSpec(channels_last=...)",
    "batch_transforms": "transforms=TransformSpec(transforms=[...], batch_transforms=...)",
    "quasi_random": "order=OrderSpec('quasi-random', quasi_random=...)",
    "even_shards": "order=OrderSpec(..., even_shards=...)",
    "rank": "order=OrderSpec(..., rank=..., world_size=...)",
    "world_size": "order=OrderSpec(..., rank=..., world_size=...)",
    "num_threads": "num_workers=... (the worker processes, or 'auto')",
}

# DataLoader's keywords that FeedLoader does not take -> feedline's way of doing what they do
DATALOADER_ONLY = {
    "sampler": "FeedLoader plans the order itself: shuffle=True, or order='random', 'quasi-random' or "
               "'shards'; under torch.distributed each rank reads its own share (DistributedSampler's job)",
    "batch_sampler": "FeedLoader makes the batches itself: batch_size= and drop_last=",
    "collate_fn": "batches come stacked (images N x 3 x H x W and the targets' tensors); to change a whole "
                  "batch, pass transforms=TransformSpec(batch_transforms=[fn(images, targets) -> (images, "
                  "targets)])",
    "worker_init_fn": "workers need no set-up: a per-sample transform fn(image, rng) gets its own numpy "
                      "Generator, drawn from (seed, epoch, index)",
    "prefetch_factor": "prefetch= (batches prepared ahead, 2 by default)",
    "generator": "seed= (an int: the order, crops and transforms are functions of (seed, epoch, index)); "
                 "left out, it is drawn from torch's global generator",
    "multiprocessing_context": "engine='processes' starts its own workers (fork, or spawn once CUDA is "
                               "initialized); engine='threads' decodes in this process",
    "pin_memory_device": "device= (batches are delivered on it) and pin_memory=",
    "in_order": "batches always come in order",
}


def checks_keywords(init):
    """``init`` (FeedLoader.__init__), checking first what needs no file opened: the source's
    kind (a torch Dataset hears "pack first" before anything else), DataLoader's keywords that
    FeedLoader answers with its own way, the keywords that moved into a spec (a TypeError
    naming it), and shuffled evaluation crops (a warning)."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def checked(self, *args, **kwargs):
        if args or "source" in kwargs:
            check_source_kind(args[0] if args else kwargs["source"])
        foreign = [k for k in kwargs if k in DATALOADER_ONLY]
        if foreign:
            raise TypeError(f"FeedLoader() takes no {foreign[0]}= (DataLoader's): {DATALOADER_ONLY[foreign[0]]}")
        moved = [k for k in kwargs if k in MOVED]
        if moved:
            where = "; ".join(f"{k}= is now {MOVED[k]}" for k in moved)
            raise TypeError(f"FeedLoader() no longer takes {', '.join(k + '=' for k in moved)}: {where}. "
                            "The specs: from feedline import AugmentSpec, OutputSpec, TransformSpec, OrderSpec")
        try:
            given = signature.bind(self, *args, **kwargs).arguments
        except TypeError:   # Python's own message, from the call itself
            return init(self, *args, **kwargs)
        warn_if_evaluation_shuffled(given.get("shuffle"), given.get("order"), given.get("train", UNSET),
                                    given.get("augment"))
        return init(self, *args, **kwargs)
    return checked


def check_source_kind(source) -> None:
    """A TypeError saying what FeedLoader reads when ``source`` is none of those kinds (a torch
    Dataset, say); whether the path exists is the store's business."""
    from ..stores import Store
    paths = isinstance(source, (list, tuple)) and source and all(isinstance(p, (str, os.PathLike)) for p in source)
    if isinstance(source, (Store, str, os.PathLike)) or paths:
        return
    kind = type(source).__name__
    hint = (" (a map-style dataset, such as a torch Dataset, is not read directly)"
            if hasattr(source, "__getitem__") and hasattr(source, "__len__") else "")
    raise TypeError(f"FeedLoader reads packed images: a .lmdb or .h5 file, a shard index (local or s3://), "
                    f"a glob or list of shards, an image folder, or an open Store; got a {kind}{hint}. Pack your "
                    "images first: `feedline pack IMAGE_FOLDER OUT.lmdb` (one folder per class, or --labels "
                    "CSV), then FeedLoader('OUT.lmdb', ...)")


_warned_shuffled_evaluation = False


def warn_if_evaluation_shuffled(shuffle, order, train, augment) -> None:
    """Shuffled, but neither ``train=`` nor ``augment=`` given: evaluation's center crops in a
    random order, which is rarely meant. Said once per process."""
    global _warned_shuffled_evaluation
    order = order.order if isinstance(order, OrderSpec) else order
    shuffles = bool(shuffle) or (isinstance(order, str) and order.lower() in (Order.RANDOM, Order.QUASI_RANDOM))
    if shuffles and train is UNSET and augment is None and not _warned_shuffled_evaluation:
        _warned_shuffled_evaluation = True
        warnings.warn("shuffled evaluation crops: pass train=True for RandomResizedCrop and flip (or "
                      "train=False to keep center crops and silence this)", stacklevel=3)


def choose_order(shuffle: bool | None, order, remote: bool = False) -> Order:
    """DataLoader's ``shuffle`` (random or sequential), unless ``order`` is given: then
    ``order`` decides, and ``shuffle``, if given too, must agree with it (True for random
    and quasi-random, False for sequential). A ``remote`` data set (shards in a bucket)
    defaults to shard-aware order, so that each rank fetches only its own shards."""
    if order is None:
        if remote and shuffle is not False:
            return Order.SHARDS
        return Order.RANDOM if shuffle else Order.SEQUENTIAL
    order = Order.parse(order, "order")
    shuffles = order is not Order.SEQUENTIAL
    if shuffle is not None and bool(shuffle) != shuffles:
        raise ValueError(f"shuffle={shuffle!r} and order={order.value!r} disagree: order= decides the order "
                         f"(and {order.value!r} {'shuffles' if shuffles else 'does not shuffle'}); leave "
                         f"shuffle unset or pass shuffle={shuffles}")
    return order
_warned_workers: set[tuple[int, int]] = set()  # (asked, usable): each said once per process


def choose_workers(num_workers) -> int:
    """Decode threads or worker processes: DataLoader's ``num_workers`` (0, DataLoader's "in this
    process", is one) up to one per usable core (more only add switching), or for "auto" this
    rank's share of the usable cores (``cores_per_rank``)."""
    if num_workers == "auto" or num_workers is None:
        return cores_per_rank()
    if isinstance(num_workers, bool) or not isinstance(num_workers, int):
        raise ValueError(f"num_workers must be an int (worker processes; 0: in this process) or 'auto', got {num_workers!r}")
    asked, usable = max(1, num_workers), usable_cores()
    if asked > usable and (asked, usable) not in _warned_workers:
        _warned_workers.add((asked, usable))
        warnings.warn(f"num_workers={asked} but this process may use {usable} cores (os.sched_getaffinity): "
                      f"using {usable} workers", stacklevel=3)
    return min(asked, usable)


def cores_per_rank() -> int:
    """The usable cores split between the ranks of this node: torchrun says how many it
    started here in ``LOCAL_WORLD_SIZE``. Without it, this process is taken to be alone on
    its cores (torch.distributed's world size spans the nodes, so it cannot say)."""
    return max(1, usable_cores() // local_ranks())


def local_ranks() -> int:
    """The ranks on this node, from torchrun's ``LOCAL_WORLD_SIZE``; 1 when it is not set."""
    value = os.environ.get("LOCAL_WORLD_SIZE", "")
    if value == "":
        return 1
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"LOCAL_WORLD_SIZE={value!r} (torchrun's ranks on this node) must be a positive int; "
                         "unset it, or pass num_workers= a number")
    return count


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


def augment_spec(augment: AugmentSpec | None, **loose) -> AugmentSpec:
    """``augment=AugmentSpec(...)``, or one built from the loose keywords (size, train): one
    way or the other, not both. With a size schedule the caller passes epoch 0's size
    (LoaderConfig.spec_at gives the others)."""
    return _one_way("augment", AugmentSpec, augment, {k: v for k, v in loose.items() if v is not UNSET})
def transform_spec(transforms) -> TransformSpec:
    """``transforms=TransformSpec(...)``, or one from a list of per-sample transforms; every
    callable checked to take the two arguments feedline passes."""
    spec = transforms if isinstance(transforms, TransformSpec) else TransformSpec(transforms)
    for name, items, call in (("transforms", spec.transforms, "fn(image, rng): image a uint8 H x W x 3 numpy "
                               "array, rng a numpy Generator for its random draws, returning the image"),
                              ("batch_transforms", spec.batch_transforms, "fn(images, targets) -> (images, targets)")):
        for i, item in enumerate(items):
            if callable(item) and not type(item).__module__.startswith("feedline.") and not takes_two_arguments(item):
                what = getattr(item, "__qualname__", type(item).__name__)
                raise TypeError(f"{name}[{i}] ({what}) cannot take two arguments (a torchvision-style transform "
                                f"takes one); feedline calls each of {name} as {call}. Wrap it, e.g. "
                                f"lambda image, rng: ..., and draw its randomness from rng")
    return spec


def takes_two_arguments(fn) -> bool:
    """Whether ``fn(a, b)`` binds; True when the signature cannot be read (a builtin)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return True
    try:
        signature.bind(None, None)
    except TypeError:
        return False
    return True
def order_spec(order) -> OrderSpec:
    """``order=OrderSpec(...)``, or one from an order's name (or None: ``shuffle`` decides)."""
    return order if isinstance(order, OrderSpec) else OrderSpec(order)
def output_spec(output: OutputSpec | None, device=None, **loose) -> OutputSpec:
    """``output=OutputSpec(...)``, or one built from the loose keywords (mean, std, dtype),
    with ``device`` (given here or in the spec, not two different ones)."""
    spec = _one_way("output", OutputSpec, output, {k: v for k, v in loose.items() if v is not UNSET})
    if device is not None:
        device = str(torch.device(device))
        if spec.device is not None and spec.device != device:
            raise ValueError(f"device={device!r} and output=OutputSpec(device={spec.device!r}) disagree; "
                             "give the device once")
        spec = replace(spec, device=device)
    return replace(spec, device=resolve_device(spec.device))
def _one_way(option: str, kind: type, given, named: dict):
    if given is None:
        return kind(**named)
    if not isinstance(given, kind):
        raise TypeError(f"{option}= takes a {kind.__name__}, got {type(given).__name__}")
    if named:
        raise ValueError(f"{option}={kind.__name__}(...) and the keywords {', '.join(sorted(named))} are both "
                         f"given: pass the {option} options one way, inside {kind.__name__} or as keywords")
    return given
