"""Shard-aware order: pure, equal parts per rank, each rank reading a run of whole shards
(at most the two on its cuts shared), and the records of a window of shards shuffled together."""
from __future__ import annotations

import numpy as np
import pytest

from feedline.planning.order import shard, shard_order

COUNTS = [10, 7, 13, 10, 9, 11, 12, 8]   # 80 records in 8 shards of unequal sizes


def shard_of(records: np.ndarray) -> np.ndarray:
    return np.searchsorted(np.cumsum(COUNTS), records, side="right")


@pytest.mark.parametrize("world", [1, 2, 3, 7])
def test_padded_parts_cover_the_records_once_with_equal_counts(world):
    n = sum(COUNTS)
    parts = [shard_order(COUNTS, seed=1, epoch=2, rank=r, world_size=world) for r in range(world)]
    assert [len(p) for p in parts] == [len(shard(np.arange(n), r, world)) for r in range(world)]
    joined = np.concatenate(parts)
    assert set(joined.tolist()) == set(range(n))
    assert len(joined) - n == (-n) % world   # the padding: a wrap-around of fewer than world records


@pytest.mark.parametrize("world", [2, 3, 7])
def test_unpadded_parts_visit_each_record_once_with_the_counts_of_shard(world):
    n = sum(COUNTS)
    parts = [shard_order(COUNTS, 1, 2, r, world, pad=False) for r in range(world)]
    assert [len(p) for p in parts] == [len(shard(np.arange(n), r, world, pad=False)) for r in range(world)]
    assert sorted(np.concatenate(parts).tolist()) == list(range(n))


def test_a_rank_reads_a_run_of_shards_and_shares_at_most_its_two_cut_shards():
    parts = [shard_order(COUNTS, 5, 0, r, 2) for r in range(2)]
    shards = [set(shard_of(p).tolist()) for p in parts]
    assert len(shards[0] & shards[1]) <= 2
    assert shards[0] | shards[1] == set(range(len(COUNTS)))
    even = [shard_order([10] * 8, 5, 0, r, 2) for r in range(2)]   # shards that divide evenly: none shared
    assert not set((even[0] // 10).tolist()) & set((even[1] // 10).tolist())


def test_the_order_is_a_pure_function_of_seed_epoch_rank_and_world():
    a = shard_order(COUNTS, 3, 4, 1, 2)
    assert np.array_equal(a, shard_order(COUNTS, 3, 4, 1, 2))
    for other in ((4, 4, 1, 2), (3, 5, 1, 2), (3, 4, 0, 2), (3, 4, 1, 3)):
        assert not np.array_equal(a, shard_order(COUNTS, *other))


def test_records_are_shuffled_within_a_window_of_shards_only():
    order = shard_order(COUNTS, 0, 0, 0, 1, window=2)
    shards = shard_of(order)
    first_seen = list(dict.fromkeys(shards.tolist()))
    windows = {s: first_seen.index(s) // 2 for s in first_seen}
    place = np.array([windows[s] for s in shards.tolist()])
    assert np.all(np.diff(place) >= 0), "a window's records all come before the next window's"
    within = order[place == 0]
    assert not np.all(np.diff(within) > 0), "records within a window are shuffled"
    assert sorted(first_seen) == list(range(len(COUNTS)))
    assert first_seen != list(dict.fromkeys(shard_of(shard_order(COUNTS, 0, 1, 0, 1)).tolist())), \
        "shards are permuted anew each epoch"


def test_bad_rank_or_window_is_refused():
    with pytest.raises(ValueError, match="rank 2"):
        shard_order(COUNTS, 0, 0, 2, 2)
    with pytest.raises(ValueError, match="window"):
        shard_order(COUNTS, 0, 0, 0, 1, window=0)
