"""The trainer's loaders (feedline/train/data.py): each rank's FeedLoader arguments."""
from __future__ import annotations

import os

import torch

from feedline import open_dataset
from feedline.train.config import TrainConfig
from feedline.train.data import make_loader
from feedline.train.distributed import DistInfo


def test_auto_threads_take_this_ranks_share_of_the_node_cores(packed_lmdb, monkeypatch):
    """--threads auto goes to FeedLoader as num_workers="auto": under torchrun (two ranks on
    this node, LOCAL_WORLD_SIZE=2) each rank's loader takes half the usable cores; a number
    is kept. The machine's 2 cores are told as 8 here, so that the share differs."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    info = DistInfo(rank=1, world_size=2, local_rank=1)
    with open_dataset(str(packed_lmdb)) as store:
        for threads, expected in (("auto", 4), (3, 3)):
            cfg = TrainConfig(synthetic=True, size=32, batch_size=4, device="cpu", engine="threads",
                              decoder="opencv", threads=threads)
            loader = make_loader(store, cfg, info, torch.float32, train=True)
            assert loader.config.num_workers == expected, threads
            assert (loader.config.rank, loader.config.world_size) == (1, 2)
            loader.close()
