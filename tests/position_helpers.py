"""Shared by the elastic-resume tests (tests/test_position*.py, tests/position_rank.py); holds
no tests itself. Their data set has one class per record, so a batch's labels name its records."""
from __future__ import annotations

import os

import torch

from feedline import FeedLoader, OrderSpec
from feedline.transforms import ColorJitter, RandomErasing

RECORDS = 48
# Crops, flips and two per-sample augmentations drawn from (seed, epoch, index); a seed given,
# so ranks without a process group (the one-process tests) agree on the order.
OPTIONS = dict(train=True, size=32, device="cpu", seed=7, decoder="opencv",
               transforms=[ColorJitter(0.4, 0.4, 0.4, 0.1), RandomErasing(0.5)])
ORDERS = ("random", "quasi-random", "shards")
QUASI = (4, 3)   # blocks of 4 records, windows of 3 blocks: several windows in 48 records


def pack_one_class_per_record(root) -> dict[str, str]:
    """48 JPEGs, each its own class, packed into one LMDB file and into 4 shards: the path
    to read for each order."""
    from converters import pack
    from feedline.sample import make_photo_folder
    folder = os.path.join(root, "images")
    make_photo_folder(folder, n=RECORDS, classes=RECORDS, seed=3, sizes=[(160, 120), (120, 160), (96, 96)])
    pack(folder, os.path.join(root, "one.lmdb"), progress=False)
    pack(folder, os.path.join(root, "shards", "four.lmdb"), num_shards=4, progress=False)
    one = os.path.join(root, "one.lmdb")
    return {"random": one, "quasi-random": one, "shards": os.path.join(root, "shards", "four.shards.json")}


def make_loader(path: str, order: str, batch_size: int, rank: int | None = None, world_size: int | None = None,
                engine: str = "threads", num_workers: int = 1, **kw) -> FeedLoader:
    """A loader on ``rank`` of ``world_size`` (None: torch.distributed's place)."""
    spec = OrderSpec(order, quasi_random=QUASI, rank=rank, world_size=world_size)
    return FeedLoader(path, batch_size=batch_size, order=spec, engine=engine, num_workers=num_workers,
                      **{**OPTIONS, **kw})


def samples(batches) -> list[tuple[int, torch.Tensor]]:
    """(record, pixels) of every image of ``batches``, in order."""
    return [(int(label), image.clone()) for images, labels in batches for image, label in zip(images, labels)]


def taken(loader, count: int) -> tuple[list, dict]:
    """The samples of the first ``count`` batches of the loader's next iteration, and its state then."""
    it = iter(loader)
    got = samples(next(it) for _ in range(count))
    state = loader.state_dict()
    it.close()
    return got, state


def uninterrupted(path: str, order: str, world_size: int, batch_size: int, epoch: int) -> dict[int, torch.Tensor]:
    """Every record's pixels in an uninterrupted epoch over ``world_size`` ranks (one process)."""
    pixels = {}
    for rank in range(world_size):
        with make_loader(path, order, batch_size, rank, world_size) as loader:
            loader.set_epoch(epoch)
            pixels.update(samples(loader))
    return pixels
