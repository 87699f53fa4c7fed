"""Where FeedLoader stands after a break or a full epoch, the saved state's keys and versions,
and the refusals of a state saved by another loader: each compared with an uninterrupted run."""
from __future__ import annotations

import pytest
import torch
from loader_helpers import small


STATE_KEYS = {"version", "epoch", "batch", "rank", "seed", "order", "batch_size", "drop_last", "world_size",
              "even_shards", "quasi_random", "samples", "resumed"}


def epoch_batches(loader, epoch):
    loader.set_epoch(epoch)
    return [(x.clone(), y.clone()) for x, y in loader]


def assert_same(got, want):
    assert len(got) == len(want) > 0
    for (x, y), (wx, wy) in zip(got, want):
        assert torch.equal(y, wy) and torch.equal(x, wx)


@pytest.fixture(scope="module")
def reference(packed_lmdb):
    """Epochs 0, 1 and 2 of an uninterrupted loader."""
    loader = small(packed_lmdb)
    return {epoch: epoch_batches(loader, epoch) for epoch in (0, 1, 2)}


def test_iterating_again_after_a_break_starts_the_next_epoch(packed_lmdb, reference):
    loader = small(packed_lmdb)
    loader.set_epoch(0)
    for k, _ in enumerate(loader):
        if k == 1:
            break
    assert_same([(x.clone(), y.clone()) for x, y in loader], reference[1])


def test_set_epoch_after_a_break_restarts_that_epoch(packed_lmdb, reference):
    loader = small(packed_lmdb)
    loader.set_epoch(1)
    for k, _ in enumerate(loader):
        if k == 2:
            break
    assert_same(epoch_batches(loader, 1), reference[1])


def test_after_a_full_epoch_the_state_points_at_the_next_one(packed_lmdb, reference):
    loader = small(packed_lmdb)
    assert_same(epoch_batches(loader, 1), reference[1])
    state = loader.state_dict()
    assert set(state) == STATE_KEYS and (state["epoch"], state["batch"]) == (2, 0)
    resumed = small(packed_lmdb)
    resumed.load_state_dict(state)
    assert_same([(x.clone(), y.clone()) for x, y in resumed], reference[2])


def test_a_version_1_state_resumes_with_shuffle_as_order(packed_lmdb, reference):
    state = {"version": 1, "epoch": 1, "batch": 2, "seed": 7, "shuffle": True, "batch_size": 10,
             "world_size": 1, "samples": 48}
    loader = small(packed_lmdb)
    loader.load_state_dict(state)
    assert_same([(x.clone(), y.clone()) for x, y in loader], reference[1][2:])
    with pytest.raises(ValueError, match=r"order='random', this one has 'sequential'"):
        small(packed_lmdb, shuffle=False).load_state_dict(state)


def test_resume_refusals_name_what_differs_and_what_to_do(packed_lmdb):
    state = small(packed_lmdb).state_dict()
    with pytest.raises(ValueError, match=r"the saved loader had seed=7, this one has 8"):
        small(packed_lmdb, seed=8).load_state_dict(state)
    with pytest.raises(ValueError, match=r"version 9; this feedline reads versions 1, 2, 3 \(it writes 3\)\. "
                                         r"Resume with the feedline that saved it, or start the epoch afresh$"):
        small(packed_lmdb).load_state_dict({**state, "version": 9})
