"""Which samples an epoch visits, in which order, on which rank: pure functions."""
from __future__ import annotations

import math

import numpy as np


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """A permutation of range(n) from (seed, epoch) alone, or range(n) without shuffle."""
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    return np.random.Generator(np.random.PCG64([seed, epoch])).permutation(n).astype(np.int64)


def quasi_random_order(n: int, seed: int, epoch: int, block: int, window: int) -> np.ndarray:
    """A page-aware permutation of range(n) from (seed, epoch) alone, for data bigger than RAM.

    Records are cut into blocks of ``block`` neighbours (neighbours on disk: records are
    stored in index order); the blocks are shuffled; then each run of ``window`` consecutive
    blocks of that shuffled list is one window, whose records are shuffled together. An
    epoch therefore reads the file one window at a time, each block in one sequential
    read, while a batch still draws from ``window`` blocks spread over the whole file.
    """
    if block < 1 or window < 1:
        raise ValueError(f"block and window must be >= 1, got {block}, {window}")
    rng = np.random.Generator(np.random.PCG64([seed, epoch]))
    blocks = rng.permutation(-(-n // block))
    starts = blocks * block
    lengths = np.minimum(block, n - starts)
    # Every record of the shuffled blocks, block after block: its block's start plus its place.
    owner = np.repeat(np.arange(len(blocks)), lengths)
    first = np.cumsum(lengths) - lengths
    records = starts[owner] + (np.arange(n) - first[owner])
    # Shuffle within windows: sort by window, then by a random key.
    keys = (owner // window).astype(np.float64) + rng.random(n)
    return records[np.argsort(keys, kind="stable")].astype(np.int64)


def shard(order: np.ndarray, rank: int, world_size: int, pad: bool = True) -> np.ndarray:
    """This rank's share, as DistributedSampler: every world_size-th sample from ``rank``.

    ``pad=True`` first wraps the order around to a multiple of world_size, so every rank
    gets the same count and DDP never waits on a rank that ran out of data (training).
    ``pad=False`` visits each sample exactly once over all ranks; counts then differ by
    at most one (evaluation, where a duplicate would be counted twice)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
    if world_size == 1:
        return order
    if not pad:
        return order[rank::world_size]
    per_rank = math.ceil(len(order) / world_size)
    total = per_rank * world_size
    padded = np.resize(order, total)  # np.resize repeats the array: wrap-around padding
    return padded[rank:total:world_size]


def batch_count(samples: int, batch_size: int, drop_last: bool) -> int:
    return samples // batch_size if drop_last else math.ceil(samples / batch_size)
