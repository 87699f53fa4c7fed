"""The trainer's data: open and check the stores, then build FeedLoaders for this rank."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core.choices import Order
from ..core.config import OrderSpec, OutputSpec
from ..loading.loader import FeedLoader
from ..stores import Store, is_remote, open_dataset
from .config import TrainConfig, TrainError
from .distributed import DistInfo
from .recipe import loader_options


@dataclass
class Data:
    train: Store | None
    val: Store | None
    num_classes: int


def _num_classes(store: Store) -> int:
    labels = store.labels
    top = int(labels.max()) + 1 if len(labels) else 0
    return max(len(store.classes), top)


def open_data(cfg: TrainConfig, info: DistInfo) -> Data:
    """Open TRAIN and --val and check what would otherwise fail late or silently: a batch
    larger than one rank's share, a --val too small for the ranks (its targets: task.py)."""
    if cfg.train is None:  # --synthetic without data
        return Data(None, None, cfg.num_classes or 1000)
    train = open_dataset(cfg.train)
    per_rank = math.ceil(len(train) / info.world_size)
    if cfg.batch_size > per_rank:
        where = f"{per_rank} per rank over {info.world_size} ranks" if info.distributed else "images"
        raise TrainError(f"--batch-size {cfg.batch_size} is larger than the data set: {cfg.train} has "
                         f"{len(train)} images ({where}); use --batch-size {per_rank} or less")
    num_classes = _num_classes(train)
    if cfg.num_classes is not None:
        if cfg.num_classes < num_classes:
            raise TrainError(f"--num-classes {cfg.num_classes} is less than the {num_classes} classes of "
                             f"{cfg.train}; leave it out to take the count from the data")
        num_classes = cfg.num_classes
    val = open_dataset(cfg.val) if cfg.val is not None else None
    if val is not None:
        _check_val(val, cfg, info.world_size)
    return Data(train, val, num_classes)


def _check_val(val: Store, cfg: TrainConfig, world_size: int) -> None:
    """What --val needs whatever the run learns; its targets are checked against the task
    (`task.check_val`)."""
    if len(val) < world_size:
        raise TrainError(f"--val {cfg.val} has {len(val)} images for {world_size} ranks; every rank "
                         "needs at least one")


def make_loader(store: Store, cfg: TrainConfig, info: DistInfo, dtype: torch.dtype, train: bool,
                num_classes: int | None = None):
    """A FeedLoader for this rank. Training: in --order, augmented, dropping the last partial
    batch (every step the same shape), every rank the same number of batches (DDP steps in
    lockstep). Validation: in order, center-cropped, each image exactly once over all ranks
    (``even_shards=False``: no padding duplicates, ranks may differ by one batch). The recipe
    (augmentations, mixing, size schedule, --eval-size): recipe.py."""
    try:
        return FeedLoader(store, **loader_arguments(cfg, info, dtype, train, num_classes, remote=is_remote(store)))
    except ValueError as exc:  # the loader's option checks
        raise TrainError(f"{store.filename}: {exc}") from None


def loader_arguments(cfg: TrainConfig, info: DistInfo, dtype: torch.dtype, train: bool,
                     num_classes: int | None = None, remote: bool = False) -> dict:
    """FeedLoader's arguments for this rank, from the run's config: its specs and DataLoader's keywords.
    A ``remote`` data set (a bucket) is read in shard order, training and validation alike, so
    that each rank fetches only its own shards (validation still visits each image once)."""
    chosen = Order.SHARDS if remote else cfg.order if train else None
    order = OrderSpec(chosen, rank=info.rank, world_size=info.world_size, even_shards=train)
    train_only = {"train": True} if train else {}   # validation: train=False is in its AugmentSpec
    return dict(batch_size=cfg.batch_size, shuffle=None if remote else train, **train_only, engine=cfg.engine, decoder=cfg.decoder,
                num_workers=cfg.threads, device=str(info.device), output=OutputSpec(dtype=dtype,
                channels_last=cfg.channels_last), drop_last=train, seed=cfg.seed, on_error=cfg.on_error,
                order=order, **loader_options(cfg, train, num_classes))
