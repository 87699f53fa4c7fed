"""Epoch order and rank shards: permutations from (seed, epoch), and set arithmetic over the
indices each rank gets, against torch's DistributedSampler written out in tests/oracles.py."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import oracles
from feedline.planning.order import batch_count, epoch_order, quasi_random_order, shard


def test_permutation_is_a_pure_function_of_seed_and_epoch():
    a = epoch_order(1000, seed=3, epoch=5, shuffle=True)
    assert a.dtype == np.int64
    assert np.array_equal(a, epoch_order(1000, seed=3, epoch=5, shuffle=True))
    assert sorted(a.tolist()) == list(range(1000))
    assert not np.array_equal(a, epoch_order(1000, seed=3, epoch=6, shuffle=True))
    assert not np.array_equal(a, epoch_order(1000, seed=4, epoch=5, shuffle=True))
    assert not np.array_equal(a, np.arange(1000))
    # (seed, epoch) is not a sum or a swap of the two
    assert not np.array_equal(epoch_order(50, 1, 2, True), epoch_order(50, 2, 1, True))
    assert not np.array_equal(epoch_order(50, 0, 3, True), epoch_order(50, 1, 2, True))


def test_without_shuffle_the_order_is_the_records_order():
    for n in (0, 1, 7):
        got = epoch_order(n, 0, 0, shuffle=False)
        assert got.dtype == np.int64 and got.tolist() == list(range(n))
    assert epoch_order(7, 5, 9, shuffle=False).tolist() == list(range(7))


def test_permutations_are_stable_across_versions():
    """A checkpoint saved by one feedline resumes the same order in the next: these values
    may change only with a new loader state version."""
    assert epoch_order(10, 0, 0, True).tolist() == [4, 6, 2, 7, 3, 5, 9, 0, 8, 1]
    assert epoch_order(10, 7, 3, True).tolist() == [3, 5, 4, 7, 8, 0, 9, 2, 1, 6]


def test_every_record_is_equally_likely_at_every_place():
    """Over many epochs each record lands first (and last) about equally often."""
    n, epochs = 8, 4000
    orders = np.stack([epoch_order(n, 11, e, True) for e in range(epochs)])
    for place in (0, n - 1):
        counts = np.bincount(orders[:, place], minlength=n)
        expected = epochs / n
        chi2 = float(((counts - expected) ** 2 / expected).sum())
        assert chi2 < 30, counts   # 7 degrees of freedom: 30 is far beyond p = 0.0001
    assert len({tuple(o) for o in orders.tolist()}) > 0.9 * epochs


@pytest.mark.parametrize("n", [1, 2, 7, 10, 97, 128, 1001])
@pytest.mark.parametrize("world", range(1, 9))
def test_shards_equal_distributed_sampler_and_are_disjoint_covering_and_equal(n, world):
    order = epoch_order(n, seed=1, epoch=2, shuffle=True)
    shards = [shard(order, r, world) for r in range(world)]
    assert [s.tolist() for s in shards] == [oracles.shard(order.tolist(), r, world) for r in range(world)]
    per_rank = -(-n // world)
    assert all(len(s) == per_rank for s in shards), "every rank must get the same number of samples"
    counts = Counter(np.concatenate(shards).tolist())
    assert set(counts) == set(range(n)), "together the ranks visit every record"
    padding = per_rank * world - n
    assert padding < world or n < world
    # disjoint except for the wrap-around padding, which repeats the first records of the order
    repeated = Counter({i: c - 1 for i, c in counts.items() if c > 1})
    assert sum(repeated.values()) == padding
    wrapped = Counter((order.tolist() * world)[:padding])
    assert repeated == wrapped
    for bs in (1, 3, 8):
        for drop in (False, True):
            assert len({batch_count(len(s), bs, drop) for s in shards}) == 1


@pytest.mark.parametrize("n", [1, 5, 10, 97])
@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_unpadded_shards_visit_each_record_exactly_once(n, world):
    order = epoch_order(n, seed=4, epoch=0, shuffle=True)
    shards = [shard(order, r, world, pad=False) for r in range(world)]
    assert [s.tolist() for s in shards] == [order.tolist()[r::world] for r in range(world)]
    together = np.concatenate(shards).tolist()
    assert sorted(together) == list(range(n))   # disjoint and covering: no duplicate at all
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


def test_one_rank_gets_the_whole_order_in_order():
    order = epoch_order(13, 2, 2, True)
    assert shard(order, 0, 1).tolist() == order.tolist()
    assert shard(order, 0, 1, pad=False).tolist() == order.tolist()


@pytest.mark.parametrize("rank,world", [(2, 2), (-1, 2), (0, 0), (5, 3)])
def test_shard_rejects_a_rank_outside_the_world(rank, world):
    """The message names the rank and the ranks that exist."""
    with pytest.raises(ValueError, match=rf"rank {rank} is not in 0\.\.{world - 1}\b"):
        shard(np.arange(10), rank, world)


@pytest.mark.parametrize("samples", [0, 1, 7, 8, 9, 64, 65])
@pytest.mark.parametrize("batch_size", [1, 3, 8])
def test_batch_count_is_full_batches_plus_a_partial_one_unless_dropped(samples, batch_size):
    full, rest = divmod(samples, batch_size)
    assert batch_count(samples, batch_size, drop_last=True) == full
    assert batch_count(samples, batch_size, drop_last=False) == full + (rest > 0)


# -- quasi-random (page-aware) order ----------------------------------------------------------

def window_of_each_position(order: np.ndarray, block: int, window: int) -> np.ndarray:
    """For each place in ``order``, the window its record belongs to: blocks (records
    r // block) numbered by first appearance, then cut into runs of ``window`` blocks."""
    blocks = (order // block).tolist()
    rank = {}
    for b in blocks:
        rank.setdefault(b, len(rank))
    return np.array([rank[b] // window for b in blocks], dtype=np.int64)


@pytest.mark.parametrize("n,block,window", [(1000, 16, 4), (1000, 7, 3), (97, 10, 2), (50, 1, 1),
                                            (64, 8, 100), (5, 16, 256), (1, 1, 1), (0, 4, 4)])
def test_quasi_random_order_reads_whole_blocks_one_window_at_a_time(n, block, window):
    """A permutation of range(n) from (seed, epoch) alone; the records of each window of
    ``window`` blocks come together, each block whole inside its window."""
    order = quasi_random_order(n, 3, 1, block, window)
    assert order.dtype == np.int64
    assert sorted(order.tolist()) == list(range(n))
    assert order.tolist() == quasi_random_order(n, 3, 1, block, window).tolist()
    where = window_of_each_position(order, block, window)
    assert (np.diff(where) >= 0).all(), "a window's records are read together"
    windows = -(-(-(-n // block)) // window)
    assert len(set(where.tolist())) == windows
    for w in range(windows):   # each window holds exactly its blocks' records, all of them
        records = order[where == w]
        blocks = set((records // block).tolist())
        assert len(blocks) == min(window, -(-n // block) - w * window)
        assert sorted(records.tolist()) == [r for b in sorted(blocks) for r in range(b * block, min(n, (b + 1) * block))]


def test_quasi_random_order_shuffles_blocks_and_records_within_windows():
    n, block, window = 4096, 16, 8
    orders = [quasi_random_order(n, 0, e, block, window) for e in range(3)]
    assert orders[0].tolist() != orders[1].tolist() != orders[2].tolist()
    assert orders[0].tolist() != quasi_random_order(n, 1, 0, block, window).tolist()
    order = orders[0]
    # blocks come in a random order, spread over the whole file
    first_blocks = list(dict.fromkeys((order // block).tolist()))
    assert first_blocks != sorted(first_blocks)
    assert np.corrcoef(np.arange(len(first_blocks)), first_blocks)[0, 1] < 0.2
    # within a window the records are shuffled across its blocks, not read block after block
    head = order[:block * window]
    assert len(set((head[:block] // block).tolist())) > 3
    assert (np.diff(head) == 1).mean() < 0.2
    # a window as large as the data set is a full random permutation
    full = quasi_random_order(n, 0, 0, block, n)
    assert (np.diff(full) == 1).mean() < 0.01


def test_quasi_random_orders_are_stable_across_versions():
    """As for the random order: a saved position resumes the same records in the next
    feedline only while these values stay (or the loader state version changes)."""
    assert quasi_random_order(12, 0, 0, 3, 2).tolist() == [7, 6, 1, 2, 8, 0, 9, 11, 3, 5, 10, 4]
    assert quasi_random_order(10, 5, 2, 4, 1).tolist() == [3, 0, 1, 2, 6, 5, 7, 4, 8, 9]


def test_quasi_random_order_rejects_empty_blocks_and_windows():
    for block, window in [(0, 4), (4, 0), (-1, 1)]:
        with pytest.raises(ValueError, match="block and window"):
            quasi_random_order(10, 0, 0, block, window)
