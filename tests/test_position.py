"""Resuming from every rank's loader state on another topology: what the gathered states
mean (hand-worked), the refusals of a partial or mixed set, and in one process (ranks told
their place) a 4-rank epoch resumed on 3 ranks and again on 2, each record once with the
pixels of an uninterrupted epoch; a bucket's remaining shards re-dealt."""
from __future__ import annotations

import hashlib
import os

import pytest
import torch
from position_helpers import (ORDERS, QUASI, RECORDS, make_loader, pack_one_class_per_record, samples, taken,
                              uninterrupted)

from feedline import FeedLoader, OrderSpec
from feedline.core.choices import Order
from feedline.planning.plan import EpochPlan, Segment
from feedline.planning.position import Position, position_from_state

# A loader of 3 ranks, batches of 3, over 10 records, and the states of 4 ranks of batch 2.
EXPECTED = {"seed": 7, "order": "random", "batch_size": 3, "drop_last": False, "world_size": 3,
            "even_shards": True, "quasi_random": [16, 256], "samples": 10}


def rank_states(batches=(1, 1, 1, 1), world=4, batch=2, **kw) -> list[dict]:
    return [{**EXPECTED, "version": 3, "epoch": 1, "batch": b, "rank": r, "world_size": world, "batch_size": batch,
             "resumed": [], **kw} for r, b in enumerate(batches)]


def test_every_ranks_state_makes_what_they_delivered_a_segment_of_the_epoch():
    assert position_from_state(rank_states(), EXPECTED) == Position(1, 0, (Segment(4, 2, (1, 1, 1, 1)),))
    # The same topology, every rank at the same batch: the ranks' own position, exactly.
    assert position_from_state(rank_states((2, 2, 2), world=3, batch=3), EXPECTED) == Position(1, 2)
    assert position_from_state(rank_states((0, 0, 0, 0)), EXPECTED) == Position(1, 0)   # nothing delivered
    earlier = [{"world_size": 2, "batch_size": 4, "batches": [1, 1]}]
    assert position_from_state(rank_states(resumed=earlier), EXPECTED) == Position(
        1, 0, (Segment(2, 4, (1, 1)), Segment(4, 2, (1, 1, 1, 1))))
    # One rank's state of version 2 (no rank, no segments) still resumes on its own topology.
    old = {k: v for k, v in rank_states((2, 2, 2), world=3, batch=3)[1].items() if k not in ("rank", "resumed")}
    assert position_from_state({**old, "version": 2}, EXPECTED) == Position(1, 2)


def changed(states: list[dict], which: int, **change) -> list[dict]:
    """``states`` with rank ``which``'s changed."""
    return [{**s, **change} if s["rank"] == which else s for s in states]


HOW = r"; gather every rank's state_dict\(\) \(torch.distributed.all_gather_object\) from the same step"
REFUSED = [
    (rank_states()[:2] + rank_states()[3:], r"^cannot resume: 3 loader states for a world_size of 4: missing rank\(s\) 2"
     + HOW),
    (rank_states()[:2] + rank_states()[1:2] + rank_states()[3:],
     r"4 loader states for a world_size of 4: missing rank\(s\) 2; rank\(s\) 1 given twice" + HOW),
    (changed(rank_states(), 2, epoch=2), r"the loader states disagree on epoch \(1, 2\): they are not "
     r"from one step of one run" + HOW),
    (changed(rank_states(), 0, seed=8), r"disagree on seed \(7, 8\)"),
    (changed(rank_states(), 3, rank=4), r"missing rank\(s\) 3; rank\(s\) 4 not in 0..3"),
    ([{k: v for k, v in s.items() if k not in ("rank", "resumed")} | {"version": 2} for s in rank_states()],
     r"from loader states of version 1 or 2 \(they do not say their rank\): pass one rank's state on the same"),
    (changed(rank_states(), 1, version=9), r"the loader state has version 9; this feedline reads versions "
     r"1, 2, 3 \(it writes 3\)"),
    ([], r"^cannot resume from an empty list of loader states: gather every rank's state_dict"),
    (rank_states(samples=11), r"the saved loader had samples=11, this one has 10$"),
    (rank_states(order="quasi-random"), r"the saved loader had order='quasi-random', this one has 'random'$"),
    (rank_states(resumed=[{"world_size": 2}]), r"the loader state's 'resumed' is damaged"),
    (rank_states(resumed=[{"world_size": 2, "batch_size": 2, "batches": [1]}]), r"1 ranks' batches for a world_size "
     r"of 2"),
    (changed(rank_states(), 1, batch=-1), r"the loader state's batch is -1, not an int >= 0$"),
    (rank_states()[0], r"the saved loader had batch_size=2, this one has 3$"),   # one rank's: the same topology only
]


@pytest.mark.parametrize("states, said", REFUSED)
def test_a_partial_or_mixed_set_of_states_is_refused_in_one_line_saying_what_to_do(states, said):
    with pytest.raises(ValueError, match=said) as caught:
        position_from_state(states, EXPECTED)
    assert "\n" not in str(caught.value)


def test_what_is_not_a_state_is_a_type_error():
    with pytest.raises(TypeError, match=r"a loader state is the dict state_dict\(\) returned \(or a list of every "
                                        r"rank's\), got str"):
        position_from_state(["not a state"], EXPECTED)


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    return pack_one_class_per_record(tmp_path_factory.mktemp("elastic"))


@pytest.mark.parametrize("order", ORDERS)
def test_four_ranks_resumed_on_three_then_on_two_deliver_each_record_once_with_its_pixels(paths, order):
    path = paths[order]
    pixels = uninterrupted(path, order, 4, 2, epoch=1)
    assert len(pixels) == RECORDS
    delivered, states = [], []
    for rank in range(4):   # 12 records each, batches of 2: stopped after 2 batches, 16 records delivered
        with make_loader(path, order, 2, rank, 4) as loader:
            loader.set_epoch(1)
            got, state = taken(loader, 2)
            delivered += got
            states.append(state)
    middle = []
    for rank in range(3):   # 32 left: 11 each (one padding), batches of 5 in worker processes: stopped after 1
        with make_loader(path, order, 5, rank, 3, engine="processes") as loader:
            loader.load_state_dict(states)
            loader.set_epoch(1)
            assert (len(loader), loader.batches_left()) == (4, 3)
            got, state = taken(loader, 1)
            delivered += got
            middle.append(state)
    assert middle[0]["resumed"] == [{"world_size": 4, "batch_size": 2, "batches": [2, 2, 2, 2]}]
    following = []
    for rank in range(2):   # 17 left: 9 each (one padding), batches of 4 on 2 threads, then the next epoch
        with make_loader(path, order, 4, rank, 2, num_workers=2) as loader:
            loader.load_state_dict(middle)
            loader.set_epoch(1)
            rest = samples(loader)
            assert len(rest) == 9 and loader.state_dict()["resumed"] == [] and loader.state_dict()["epoch"] == 2
            delivered += rest
            following.append(samples(loader))   # iterating again: epoch 2, a normal one
    records = [r for r, _ in delivered]
    assert sorted(set(records)) == list(range(RECORDS))
    assert len(records) == RECORDS + 1   # DistributedSampler's padding: one record twice, in the last part
    for record, image in delivered:
        assert torch.equal(image, pixels[record]), (order, record)
    for rank in range(2):
        with make_loader(path, order, 4, rank, 2) as fresh:
            fresh.set_epoch(2)
            normal = samples(fresh)
        assert [r for r, _ in following[rank]] == [r for r, _ in normal]
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(following[rank], normal))


def test_every_ranks_states_on_the_same_topology_continue_exactly(paths):
    path = paths["random"]
    states = []
    for rank in range(3):
        with make_loader(path, "random", 4, rank, 3) as loader:
            loader.set_epoch(1)
            states.append(taken(loader, 2)[1])
    for rank in range(3):
        with make_loader(path, "random", 4, rank, 3) as whole, make_loader(path, "random", 4, rank, 3) as resumed:
            whole.set_epoch(1)
            want = samples(whole)[8:]
            resumed.load_state_dict(states)
            got = samples(resumed)
        assert [r for r, _ in got] == [r for r, _ in want]
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(got, want))


def test_a_drawn_seed_gives_way_to_the_gathered_one_and_another_order_is_refused(paths):
    path = paths["random"]
    states, delivered = [], set()
    for rank in range(2):
        with make_loader(path, "random", 6, rank, 2) as loader:
            got, state = taken(loader, 1)
            delivered |= {r for r, _ in got}
            states.append(state)
    with FeedLoader(path, batch_size=8, shuffle=True, train=True, size=32, device="cpu", num_workers=1,
                    engine="threads", seed=None, order=OrderSpec(rank=0, world_size=1, quasi_random=QUASI)) as alone:
        alone.load_state_dict(states)
        assert alone.config.seed == 7
        rest = {r for r, _ in samples(alone)}
    assert not rest & delivered and rest | delivered == set(range(RECORDS))
    with make_loader(path, "quasi-random", 6, 0, 1) as other, pytest.raises(
            ValueError, match=r"the saved loader had order='random', this one has 'quasi-random'$"):
        other.load_state_dict(states)


def sha(image: torch.Tensor) -> str:
    return hashlib.sha1(image.contiguous().numpy().tobytes()).hexdigest()


@pytest.mark.s3
def test_a_buckets_remaining_shards_are_re_dealt_each_rank_fetching_only_its_own(uploaded, s3_env, tmp_path):
    from feedline.stores import RemoteOptions, open_dataset
    url, _ = uploaded
    options = dict(train=True, size=32, device="cpu", seed=3, num_workers=1, engine="threads")

    def rank_loader(rank, world, batch, cache):
        store = open_dataset(url, remote=RemoteOptions(cache_dir=str(tmp_path / cache)))
        return FeedLoader(store, batch_size=batch, order=OrderSpec(rank=rank, world_size=world), **options)

    delivered, states = [], []
    for rank in range(4):   # 4 shards of 12: one shard a rank; 2 batches of 3 from it
        with rank_loader(rank, 4, 3, f"old-{rank}") as loader:
            loader.set_epoch(1)
            got, state = taken(loader, 2)
            delivered += [sha(image) for _, image in got]
            states.append(state)
    counts = (12, 12, 12, 12)
    names = sorted(os.path.basename(f) for f in open_dataset(uploaded[1]).files())
    for rank in range(2):   # 24 left, 6 in each shard: each new rank reads two whole shards' rest
        with rank_loader(rank, 2, 4, f"new-{rank}") as loader:
            assert loader.config.order is Order.SHARDS
            loader.load_state_dict(states)
            loader.set_epoch(1)
            before = len(loader.store.cache.fetched)
            delivered += [sha(image) for _, image in samples(loader)]
            fetched = set(loader.store.cache.fetched[before:])
        plan = EpochPlan(loader.config.augment, 3, 1, Order.SHARDS, 4, False, rank, 2, shards=counts,
                         resumed=(Segment(4, 3, (2, 2, 2, 2)),))
        own = {names[int(i) // 12] for i in plan.samples(RECORDS)}
        assert len(own) == 2 and fetched == own, (rank, fetched, own)
    assert len(delivered) == len(set(delivered)) == RECORDS   # each once: 24 + 24 divide evenly, no padding
