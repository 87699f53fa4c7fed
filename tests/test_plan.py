"""The epoch plan's arithmetic when part of an epoch was delivered on another topology: which
records are left and which rank reads which, hand-worked on 10 records, and the crops they keep."""
from __future__ import annotations

import numpy as np
import pytest

from feedline.planning.augment import AugmentSpec
from feedline.core.choices import Order
from feedline.planning.order import epoch_order, shard_run
from feedline.planning.plan import EpochPlan, Segment

SPEC = AugmentSpec(size=(8, 8), train=True)


def shares(order, world, batch, resumed=(), n=10, **kw) -> list[list[int]]:
    return [EpochPlan(SPEC, 3, 1, order, batch, False, rank, world, resumed=resumed, **kw).samples(n).tolist()
            for rank in range(world)]


def test_four_ranks_of_batch_2_stopped_after_one_batch_leave_two_records_for_three_ranks():
    # 10 records on 4 ranks, padded to 12 as DistributedSampler: rank r reads every 4th from r.
    assert shares(Order.SEQUENTIAL, 4, 2) == [[0, 4, 8], [1, 5, 9], [2, 6, 0], [3, 7, 1]]
    # After one batch of 2 on every rank, 0..7 are delivered; 8 and 9 are left, dealt to 3 ranks
    # as DistributedSampler deals: padded to 3 (8 again), one batch of one record each.
    stopped = (Segment(4, 2, (1, 1, 1, 1)),)
    assert shares(Order.SEQUENTIAL, 3, 3, stopped) == [[8], [9], [8]]
    # A shuffled order: the same places in the epoch's permutation.
    p = epoch_order(10, 3, 1, shuffle=True).tolist()
    assert shares(Order.RANDOM, 4, 2) == [[p[0], p[4], p[8]], [p[1], p[5], p[9]], [p[2], p[6], p[0]],
                                          [p[3], p[7], p[1]]]
    assert shares(Order.RANDOM, 3, 3, stopped) == [[p[8]], [p[9]], [p[8]]]
    assert EpochPlan(SPEC, 3, 1, Order.RANDOM, 3, False, 0, 3, resumed=stopped).count(10) == 1


def test_a_resume_on_more_ranks_deals_the_rest_in_the_epochs_order_and_can_be_resumed_again():
    # 2 ranks of batch 2: rank 0 reads 0 2 4 6 8, rank 1 1 3 5 7 9; one batch each: 0 1 2 3 delivered.
    first = Segment(2, 2, (1, 1))
    # 4..9 left, on 4 ranks of batch 1: 8 slots (two of them padding, 4 and 5 again).
    assert shares(Order.SEQUENTIAL, 4, 1, (first,)) == [[4, 8], [5, 9], [6, 4], [7, 5]]
    # Those 4 ranks stopped after one batch: 4 5 6 7 delivered, 8 and 9 left for one rank.
    assert shares(Order.SEQUENTIAL, 1, 4, (first, Segment(4, 1, (1, 1, 1, 1)))) == [[8, 9]]
    # Ranks stopped at different batches: rank 0 delivered 0 2 4 6, rank 1 nothing; 1 3 5 7 8 9
    # are left, in the epoch's order, every second one to each of 2 ranks.
    assert shares(Order.SEQUENTIAL, 2, 4, (Segment(2, 2, (2, 0)),)) == [[1, 5, 8], [3, 7, 9]]


def test_nothing_delivered_changes_nothing_and_everything_delivered_leaves_an_empty_epoch():
    assert shares(Order.RANDOM, 3, 2, (Segment(4, 2, (0, 0, 0, 0)),)) == shares(Order.RANDOM, 3, 2)
    done = (Segment(4, 2, (2, 2, 2, 2)),)
    assert shares(Order.RANDOM, 3, 2, done) == [[], [], []]
    assert EpochPlan(SPEC, 3, 1, Order.RANDOM, 2, False, 0, 3, resumed=done).count(10) == 0


def test_without_padding_the_rest_is_read_exactly_once():
    stopped = (Segment(4, 2, (1, 1, 1, 1)),)   # unpadded, 4 ranks read 3 3 2 2: 0..7 delivered
    assert shares(Order.SEQUENTIAL, 3, 3, stopped, even_shards=False) == [[8], [9], []]


@pytest.mark.parametrize("order", [Order.RANDOM, Order.QUASI_RANDOM, Order.SHARDS])
def test_each_record_of_the_epoch_is_delivered_once_over_two_resumes(order):
    n, shards = 45, (9, 12, 7, 10, 7)
    kw = dict(n=n, block=3, window=2, shards=shards if order is Order.SHARDS else ())
    first = Segment(4, 2, (3, 3, 3, 3))
    before = [s[:6] for s in shares(order, 4, 2, **kw)]
    middle = shares(order, 3, 5, (first,), **kw)
    assert len({len(s) for s in middle}) == 1   # as many records on every rank: DDP in step
    second = Segment(3, 5, (1, 1, 1))
    after = shares(order, 2, 3, (first, second), **kw)
    delivered = sum(before, []) + sum((s[:5] for s in middle), []) + sum(after, [])
    assert sorted(set(delivered)) == list(range(n))
    # The duplicates are the padding of each dealing: 24 delivered at first, then the 21 left
    # fill 3 x 7 with none, and the 6 left after those 15 fill 2 x 3 with none.
    assert len(delivered) == n and len(after[0]) == len(after[1]) == 3


def test_the_remaining_shards_are_re_dealt_as_runs_each_rank_reading_few_shards():
    counts = (10, 10, 10, 10, 10, 10, 10, 10)
    run, _ = shard_run(counts, 3, 1)
    stopped = (Segment(4, 5, (1, 1, 1, 1)),)   # 5 records from each rank's first window of shards
    parts = shares(Order.SHARDS, 2, 4, stopped, n=80, shards=counts)
    left = set(range(80)) - {r for s in shares(Order.SHARDS, 4, 5, n=80, shards=counts) for r in s[:5]}
    assert sorted(parts[0] + parts[1]) == sorted(left)
    # Each new rank reads a consecutive stretch of the shard run: its shards are neighbours
    # in the run, and the two ranks share at most the shard on their cut.
    place = {s: k for k, s in enumerate(dict.fromkeys((run // 10).tolist()))}
    places = [sorted({place[r // 10] for r in p}) for p in parts]
    for p in places:
        assert p == list(range(p[0], p[-1] + 1))
    assert len(set(places[0]) & set(places[1])) <= 1


def test_a_record_keeps_its_crop_and_flip_when_dealt_to_another_rank():
    labels = np.arange(10, dtype=np.int64)
    sizes = np.array([[40 + 3 * i, 60 - 2 * i] for i in range(10)], dtype=np.int64)
    whole = {}
    for rank in range(4):
        for b in EpochPlan(SPEC, 3, 1, Order.RANDOM, 2, False, rank, 4).batches(labels, sizes):
            for i, index in enumerate(b.indices.tolist()):
                whole[index] = (b.boxes[i].tolist(), bool(b.flips[i]))
    stopped = (Segment(4, 2, (1, 1, 1, 1)),)
    for rank in range(3):
        for b in EpochPlan(SPEC, 3, 1, Order.RANDOM, 3, False, rank, 3, resumed=stopped).batches(labels, sizes):
            for i, index in enumerate(b.indices.tolist()):
                assert (b.boxes[i].tolist(), bool(b.flips[i])) == whole[index]
                assert b.labels[i] == index
