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
    # Every world_size-th place of the order wrapped around to per_rank * world_size places.
    return order[np.arange(rank, per_rank * world_size, world_size) % max(len(order), 1)]


def batch_count(samples: int, batch_size: int, drop_last: bool) -> int:
    return samples // batch_size if drop_last else math.ceil(samples / batch_size)


SHARD_WINDOW = 2   # order='shards': a rank's shards shuffled together (read at once, so held in the cache at once)


def shard_order(counts: list[int] | tuple[int, ...], seed: int, epoch: int, rank: int, world_size: int,
                pad: bool = True, window: int = SHARD_WINDOW) -> np.ndarray:
    """This rank's records of an epoch in shard-aware order, from (seed, epoch, rank, world_size)
    and the shards' record counts alone.

    The shards are permuted from (seed, epoch) and laid end to end (``shard_run``); that run of
    records is cut into world_size consecutive parts (``deal_shard_run``), so each rank reads a
    run of whole shards (a shard on a cut is shared by two ranks) and fetches nothing else."""
    run, owner = shard_run(counts, seed, epoch)
    return deal_shard_run(run, owner, (seed, epoch), rank, world_size, pad, window)


def shard_run(counts: list[int] | tuple[int, ...], seed: int, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """Every record of the epoch, its shards permuted from (seed, epoch) and laid end to end,
    and each record's shard place in that run."""
    counts = np.asarray(counts, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)])
    n = int(starts[-1])
    shards = np.random.Generator(np.random.PCG64([seed, epoch])).permutation(len(counts))
    lengths = counts[shards]
    owner = np.repeat(np.arange(len(shards)), lengths)
    first = np.cumsum(lengths) - lengths
    return starts[shards][owner] + (np.arange(n) - first[owner]), owner


def deal_shard_run(run: np.ndarray, owner: np.ndarray, stream: tuple[int, ...], rank: int, world_size: int,
                   pad: bool = True, window: int = SHARD_WINDOW) -> np.ndarray:
    """This rank's consecutive part of a shard run (``owner``: each record's shard place, never
    decreasing). The parts are the sizes ``shard`` gives: ceil(n / world_size) each with ``pad``
    (the run wrapped around, so every rank gets the same number of batches), or each record
    once without it. Within a part, the records of each ``window`` consecutive shards are
    shuffled together, from ``stream`` (the epoch's seed and number) and the rank's place."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    n = len(run)
    if pad:   # the run wrapped around to per * world_size places
        per = -(-n // world_size)
        places = np.arange(rank * per, (rank + 1) * per) % max(n, 1)
    else:
        sizes = [len(range(r, n, world_size)) for r in range(world_size)]
        places = np.arange(sum(sizes[:rank]), sum(sizes[:rank + 1]))
    part, part_owner = run[places], owner[places]
    # The window of each record: its shard's place among this part's shards, by window.
    _, place = np.unique(part_owner, return_inverse=True)
    order_of_first = np.argsort(np.unique(part_owner, return_index=True)[1])
    rank_of_shard = np.empty_like(order_of_first)
    rank_of_shard[order_of_first] = np.arange(len(order_of_first))
    keys = (rank_of_shard[place] // window).astype(np.float64) + np.random.Generator(
        np.random.PCG64([*stream, rank, world_size])).random(len(part))
    return part[np.argsort(keys, kind="stable")].astype(np.int64)
