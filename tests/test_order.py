import numpy as np
import pytest

from feedline.order import batch_count, epoch_order, shard


def test_permutation_is_a_pure_function_of_seed_and_epoch():
    a = epoch_order(1000, seed=3, epoch=5, shuffle=True)
    assert np.array_equal(a, epoch_order(1000, seed=3, epoch=5, shuffle=True))
    assert sorted(a) == list(range(1000))
    assert not np.array_equal(a, epoch_order(1000, seed=3, epoch=6, shuffle=True))
    assert not np.array_equal(a, epoch_order(1000, seed=4, epoch=5, shuffle=True))
    assert np.array_equal(epoch_order(7, 0, 0, shuffle=False), np.arange(7))


@pytest.mark.parametrize("n", [1, 2, 7, 10, 97, 128, 1001])
@pytest.mark.parametrize("world", range(1, 9))
def test_shards_are_disjoint_cover_everything_and_equal(n, world):
    order = epoch_order(n, seed=1, epoch=2, shuffle=True)
    shards = [shard(order, r, world) for r in range(world)]
    assert len({len(s) for s in shards}) == 1, "every rank must get the same number of samples"
    assert len(shards[0]) == -(-n // world)
    together = np.concatenate(shards)
    assert set(together.tolist()) == set(range(n))
    padding = len(together) - n
    assert padding < world
    if padding == 0:
        assert len(set(together.tolist())) == n  # disjoint
    # batches per rank are equal too, whatever drop_last
    for bs in (1, 3, 8):
        assert len({batch_count(len(s), bs, drop) for s in shards for drop in (False,)}) == 1


def test_shard_rejects_bad_rank():
    with pytest.raises(ValueError):
        shard(np.arange(10), 2, 2)
