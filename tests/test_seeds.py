"""feedline.planning.seeds: a FeedLoader without seed= draws its seed from torch's global generator, as
DataLoader's RandomSampler draws one, records it in state_dict, and a resumed loader takes the
saved seed; an explicit seed keeps its batches whatever the global generator."""
from __future__ import annotations

import pytest
import torch

from feedline import FeedLoader, OrderSpec
from feedline.planning.seeds import draw_seed

KW = dict(batch_size=8, shuffle=True, train=True, size=16, device="cpu", decoder="opencv", num_workers=0)


def first_epoch(path, manual_seed: int, **kw) -> list[torch.Tensor]:
    torch.manual_seed(manual_seed)
    with FeedLoader(str(path), **{**KW, **kw}) as loader:
        return [images.clone() for images, _ in loader]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def test_the_draw_is_the_seed_randomsampler_draws_from_the_same_global_state():
    torch.manual_seed(5)
    seed = draw_seed()
    torch.manual_seed(5)
    sampler_order = list(torch.utils.data.RandomSampler(range(20)))
    assert sampler_order == torch.randperm(20, generator=torch.Generator().manual_seed(seed)).tolist()


def test_global_seeds_give_their_own_batches_and_the_same_seed_the_same(packed_lmdb):
    one, two, one_again = (first_epoch(packed_lmdb, s) for s in (1, 2, 1))
    assert same(one, one_again) and not same(one, two)


def test_an_explicit_seed_ignores_the_global_generator(packed_lmdb):
    assert same(first_epoch(packed_lmdb, 1, seed=0), first_epoch(packed_lmdb, 2, seed=0))
    assert not same(first_epoch(packed_lmdb, 1, seed=0), first_epoch(packed_lmdb, 1, seed=1))


def test_state_dict_records_the_drawn_seed_and_a_resumed_loader_takes_it(packed_lmdb):
    torch.manual_seed(3)
    with FeedLoader(str(packed_lmdb), **KW) as loader:
        it = iter(loader)
        head = [next(it)[0].clone() for _ in range(2)]
        state = loader.state_dict()
        rest = [images.clone() for images, _ in it]
        assert state["seed"] == loader.config.seed
    torch.manual_seed(4)   # a different draw, then the saved seed
    with FeedLoader(str(packed_lmdb), **KW) as resumed:
        assert resumed.config.seed != state["seed"]
        resumed.load_state_dict(state)
        assert resumed.config.seed == state["seed"]
        assert same([images.clone() for images, _ in resumed], rest) and len(head + rest) == 6


def test_an_explicit_seed_refuses_a_state_saved_with_another(packed_lmdb):
    with FeedLoader(str(packed_lmdb), **KW, seed=1) as a, FeedLoader(str(packed_lmdb), **KW, seed=2) as b:
        with pytest.raises(ValueError, match="saved loader had seed=1, this one has 2"):
            b.load_state_dict(a.state_dict())


def test_ranks_without_a_process_group_give_a_shuffled_order_its_seed(packed_lmdb):
    """Ranks told their place without torch.distributed cannot agree on a draw: a shuffled order
    needs the seed given; a sequential one draws per rank (only augmentations depend on it)."""
    with pytest.raises(ValueError, match=r"seed=None draws the seed on each process, but the 2 ranks .*"
                                         r"order='random' needs one permutation for all: pass seed="):
        FeedLoader(str(packed_lmdb), **KW, order=OrderSpec(rank=0, world_size=2))
    with FeedLoader(str(packed_lmdb), **KW, order=OrderSpec(rank=0, world_size=2), seed=4) as loader:
        assert loader.config.seed == 4
    evaluation = {**KW, "shuffle": False, "train": False}
    with FeedLoader(str(packed_lmdb), **evaluation, order=OrderSpec(rank=1, world_size=2)) as loader:
        assert len(loader) == 3   # 24 of the 48 records
