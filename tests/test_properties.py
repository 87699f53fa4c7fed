"""Properties of the pure functions (augment, order, plan, substitute) under hypothesis.

Each test states its property in words in its docstring; the expected values come from
tests/oracles.py (torchvision's and DistributedSampler's documented algorithms written out
in scalar Python) or from set arithmetic, never from the code under test.
"""
from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pytest
from hypothesis import Phase, assume, given, settings, strategies as st

import oracles
from feedline.planning.augment import AugmentSpec, center_crop, plan, random_resized_crop, uniforms
from feedline.core.choices import Order
from feedline.planning.order import batch_count, epoch_order, quasi_random_order, shard, shard_order
from feedline.planning.plan import EpochPlan
from feedline.sources.substitute import substitute_index, substitute_sample

# The machine is shared and slow: no per-example deadline; a few dozen examples per property.
# Under mutation testing (.ci/mutants.sh sets FEEDLINE_MUTATION) a property that fails stops
# at its first counterexample: shrinking it would only spend the mutant's time limit.
_PHASES = ((Phase.explicit, Phase.reuse, Phase.generate) if os.environ.get("FEEDLINE_MUTATION")
           else tuple(Phase))
PROPERTY = settings(deadline=None, max_examples=60, phases=_PHASES)

seeds = st.integers(0, 2**64 - 1)
epochs = st.integers(0, 2**31)
sides = st.integers(1, 4000)
unit = st.floats(0.0, 1.0, exclude_max=True, allow_nan=False)


@st.composite
def scales(draw):
    lo = draw(st.floats(0.01, 1.0))
    return lo, draw(st.floats(lo, 1.0))


@st.composite
def ratios(draw):
    lo = draw(st.floats(0.2, 5.0))
    return lo, draw(st.floats(lo, 5.0))


# -- augment --------------------------------------------------------------------------------

@PROPERTY
@given(seed=seeds, epoch=epochs, indices=st.lists(st.integers(0, 2**62), min_size=1, max_size=8),
       stream=st.sampled_from([0, 1, oracles.SUBSTITUTE_STREAM]))
def test_uniforms_are_the_documented_hash_and_in_unit_interval(seed, epoch, indices, stream):
    """Every draw is the splitmix64 hash of (seed, epoch, stream, index, draw), in [0, 1),
    and a sample's draws do not depend on which other samples are in the call."""
    got = uniforms(seed, epoch, indices, 3, stream=stream)
    assert ((got >= 0) & (got < 1)).all()
    for row, index in zip(got.tolist(), indices):
        assert row == [oracles.uniform(seed, epoch, index, d, stream) for d in range(3)]


@PROPERTY
@given(shapes=st.lists(st.tuples(sides, sides), min_size=1, max_size=6), data=st.data(),
       scale=scales(), ratio=ratios())
def test_random_resized_crop_is_torchvision_get_params(shapes, data, scale, ratio):
    """For any image sizes, uniforms, scale and ratio ranges, the vectorized crop equals
    torchvision's RandomResizedCrop.get_params run on the same draws, sample by sample,
    and every box lies inside its image, with at least one pixel unless torchvision's own
    fallback rounds a side to zero (height * max ratio or width / min ratio below 1/2)."""
    u = np.array([data.draw(st.lists(unit, min_size=22, max_size=22)) for _ in shapes])
    H = np.array([h for h, _ in shapes])
    W = np.array([w for _, w in shapes])
    boxes = random_resized_crop(H, W, u, scale, ratio)
    for (h, w), row, box in zip(shapes, u, boxes.tolist()):
        assert tuple(box) == oracles.random_resized_crop(h, w, row.tolist(), scale, ratio)
        top, left, bh, bw = box
        assert 0 <= top and 0 <= left and top + bh <= h and left + bw <= w
        if h * ratio[1] > 0.5 and w / ratio[0] > 0.5:
            assert bh >= 1 and bw >= 1


@PROPERTY
@given(seed=seeds, epoch=epochs, indices=st.lists(st.integers(0, 2**40), min_size=1, max_size=6,
                                                  unique=True),
       shapes=st.lists(st.tuples(sides, sides), min_size=6, max_size=6), flip=st.booleans())
def test_training_plan_is_the_oracle_and_independent_of_the_batch(seed, epoch, indices, shapes, flip):
    """A training sample's box and flip are torchvision's crop from its own draws and a
    flip when its last draw is below 1/2 (never with flip=False), whatever else is in the batch."""
    H = np.array([shapes[k][0] for k in range(len(indices))])
    W = np.array([shapes[k][1] for k in range(len(indices))])
    spec = AugmentSpec(flip=flip, train=True)
    boxes, flips = plan(spec, seed, epoch, indices, H, W)
    for k, index in enumerate(indices):
        box, want_flip = oracles.train_params(seed, epoch, index, int(H[k]), int(W[k]), flip=flip)
        assert tuple(boxes[k].tolist()) == box and bool(flips[k]) == want_flip
    back = np.arange(len(indices))[::-1]
    rboxes, rflips = plan(spec, seed, epoch, np.array(indices)[back], H[back], W[back])
    assert rboxes.tolist() == boxes[back].tolist() and rflips.tolist() == flips[back].tolist()


@PROPERTY
@given(shapes=st.lists(st.tuples(st.integers(8, 3000), st.integers(8, 3000)), min_size=1, max_size=6),
       size=st.tuples(st.integers(1, 512), st.integers(1, 512)),
       crop_fraction=st.floats(0.3, 1.0), seed=seeds, epoch=epochs)
def test_eval_box_is_resize_then_center_crop(shapes, size, crop_fraction, seed, epoch):
    """An evaluation box lies inside the image, is centered (its margins differ by at most one
    resized pixel, as torchvision rounds the corner in resized pixels), is the region that
    torchvision's Resize(int(min(size) / crop_fraction)) + CenterCrop(size) shows, and does not
    depend on seed, epoch or index; no flips."""
    H = np.array([h for h, _ in shapes])
    W = np.array([w for _, w in shapes])
    spec = AugmentSpec(size=size, train=False, crop_fraction=crop_fraction)
    boxes, flips = plan(spec, seed, epoch, np.arange(len(shapes)), H, W)
    assert not flips.any()
    assert boxes.tolist() == center_crop(H, W, size, crop_fraction).tolist()
    for (h, w), (top, left, bh, bw) in zip(shapes, boxes.tolist()):
        tiny = 1e-9 * max(h, w)
        assert 0 <= top and 0 <= left and bh > 0 and bw > 0 and top + bh <= h + tiny and left + bw <= w + tiny
        (rh, rw) = oracles.resize_shorter(h, w, int(min(size) / crop_fraction))
        assert abs((h - top - bh) - top) <= h / rh + tiny and abs((w - left - bw) - left) <= w / rw + tiny
        region = oracles.eval_region(h, w, size, crop_fraction)
        if region is None:   # torchvision pads here; feedline keeps the box inside the image
            continue
        assert [top, left, bh, bw] == pytest.approx(list(region[0]), rel=1e-12, abs=1e-9)


# -- order ----------------------------------------------------------------------------------

@PROPERTY
@given(n=st.integers(0, 3000), seed=st.integers(0, 2**63), epoch=st.integers(0, 2**31))
def test_epoch_order_is_a_deterministic_permutation(n, seed, epoch):
    """The epoch order holds every record exactly once, is the same for the same
    (seed, epoch), and is range(n) without shuffling."""
    order = epoch_order(n, seed, epoch, True)
    assert sorted(order.tolist()) == list(range(n))
    assert order.tolist() == epoch_order(n, seed, epoch, True).tolist()
    assert epoch_order(n, seed, epoch, False).tolist() == list(range(n))


@PROPERTY
@given(n=st.integers(30, 3000), seed=st.integers(0, 2**62), epoch=st.integers(0, 2**30),
       other=st.integers(1, 1000))
def test_epoch_order_differs_across_epochs_and_seeds(n, seed, epoch, other):
    """Two different epochs, or two different seeds, give different orders (30! makes a
    collision by chance impossible in practice), and a shuffled order is not the identity."""
    order = epoch_order(n, seed, epoch, True).tolist()
    assert order != epoch_order(n, seed, epoch + other, True).tolist()
    assert order != epoch_order(n, seed + other, epoch, True).tolist()
    assert order != list(range(n))


@PROPERTY
@given(n=st.integers(1, 500), world=st.integers(1, 16), seed=st.integers(0, 2**32))
def test_padded_shards_are_distributed_sampler(n, world, seed):
    """With padding each rank gets DistributedSampler's share: equal counts of ceil(n / world);
    together they cover every record; the only records seen twice are the wrap-around
    padding, which repeats the start of the order."""
    order = epoch_order(n, seed, 0, True)
    shards = [shard(order, r, world).tolist() for r in range(world)]
    assert shards == [oracles.shard(order.tolist(), r, world) for r in range(world)]
    per_rank = -(-n // world)
    assert {len(s) for s in shards} == {per_rank}
    counts = Counter(i for s in shards for i in s)
    assert set(counts) == set(range(n))
    padding = per_rank * world - n
    extra = Counter({i: c - 1 for i, c in counts.items() if c > 1})
    assert extra == Counter((order.tolist() * world)[:padding])


@PROPERTY
@given(n=st.integers(0, 500), world=st.integers(1, 16), seed=st.integers(0, 2**32))
def test_unpadded_shards_partition_the_order(n, world, seed):
    """Without padding the ranks' shares are disjoint and cover the order exactly once,
    each in the order's sequence, and their sizes differ by at most one."""
    order = epoch_order(n, seed, 1, True)
    shards = [shard(order, r, world, pad=False).tolist() for r in range(world)]
    assert sorted(i for s in shards for i in s) == list(range(n))
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    position = {v: k for k, v in enumerate(order.tolist())}
    for s in shards:
        assert [position[i] for i in s] == sorted(position[i] for i in s)


@PROPERTY
@given(samples=st.integers(0, 10**6), batch_size=st.integers(1, 4096), drop_last=st.booleans())
def test_batch_count_counts_full_and_partial_batches(samples, batch_size, drop_last):
    """drop_last keeps only full batches; otherwise a partial last batch counts as one."""
    count = batch_count(samples, batch_size, drop_last)
    assert count * batch_size <= samples if drop_last else count * batch_size >= samples
    assert samples - count * batch_size < batch_size if drop_last else count * batch_size - samples < batch_size


# -- plan -----------------------------------------------------------------------------------

@st.composite
def epoch_plans(draw):
    world = draw(st.integers(1, 4))
    return EpochPlan(spec=AugmentSpec(size=(16, 16), train=draw(st.booleans())),
                     seed=draw(st.integers(0, 2**32)), epoch=draw(st.integers(0, 100)),
                     order=draw(st.sampled_from(list(Order))),
                     batch_size=draw(st.integers(1, 9)), drop_last=draw(st.booleans()),
                     rank=draw(st.integers(0, world - 1)), world_size=world,
                     even_shards=draw(st.booleans()), block=draw(st.integers(1, 9)),
                     window=draw(st.integers(1, 5)))


@PROPERTY
@given(epoch_plan=epoch_plans(), n=st.integers(1, 60), data=st.data())
def test_epoch_plan_batches_are_the_rank_share_cut_into_batches(epoch_plan, n, data):
    """The batches of an epoch are this rank's share of the epoch order (range(n), the
    seeded permutation, or the page-aware order, as ``order`` says), shared out as the
    oracle's DistributedSampler (or every world_size-th record without padding), cut into
    batch_size pieces, the partial one dropped with drop_last; each sample carries its own
    label and the box and flip it gets alone; starting at batch k skips exactly k batches."""
    labels = np.array(data.draw(st.lists(st.integers(0, 999), min_size=n, max_size=n)), dtype=np.int64)
    sizes = np.array(data.draw(st.lists(st.tuples(st.integers(1, 300), st.integers(1, 300)),
                                        min_size=n, max_size=n)), dtype=np.int64)
    p = epoch_plan
    if p.order is Order.QUASI_RANDOM:   # its own properties are in test_order.py
        order = quasi_random_order(n, p.seed, p.epoch, p.block, p.window).tolist()
    elif p.order is Order.RANDOM:
        order = epoch_order(n, p.seed, p.epoch, True).tolist()
    else:
        order = list(range(n))
    share = (oracles.shard(order, p.rank, p.world_size) if p.even_shards
             else order[p.rank::p.world_size])
    if p.order is Order.SHARDS:   # its own properties are in test_order_shards.py
        share = shard_order(p.shards or (n,), p.seed, p.epoch, p.rank, p.world_size, p.even_shards).tolist()
    cut = [share[k:k + p.batch_size] for k in range(0, len(share), p.batch_size)]
    if p.drop_last and cut and len(cut[-1]) < p.batch_size:
        cut = cut[:-1]
    batches = list(p.batches(labels, sizes))
    assert [b.indices.tolist() for b in batches] == cut
    assert p.count(n) == len(cut)
    for number, b in enumerate(batches):
        assert b.number == number and b.epoch == p.epoch and len(b) == len(b.indices)
        assert b.labels.tolist() == labels[b.indices].tolist()
        for k, index in enumerate(b.indices.tolist()):
            box, flip = plan(p.spec, p.seed, p.epoch, [index], sizes[[index], 0], sizes[[index], 1])
            assert b.boxes[k].tolist() == box[0].tolist() and bool(b.flips[k]) == bool(flip[0])
    start = data.draw(st.integers(0, len(batches)))
    resumed = list(p.batches(labels, sizes, start=start))
    assert [(b.number, b.indices.tolist()) for b in resumed] == \
        [(b.number, b.indices.tolist()) for b in batches[start:]]


# -- substitute -----------------------------------------------------------------------------

@PROPERTY
@given(seed=seeds, epoch=epochs, n=st.integers(2, 10**6), attempt=st.integers(0, 15), data=st.data())
def test_substitute_is_the_documented_pick_and_never_the_bad_record(seed, epoch, n, attempt, data):
    """The substitute of a bad record is another record of the data set (never itself), the
    same on every call, and the attempt-th draw of the substitute stream mapped onto the
    other n - 1 records in index order."""
    index = data.draw(st.integers(0, n - 1))
    sub = substitute_index(seed, epoch, index, attempt, n)
    assert 0 <= sub < n and sub != index
    assert sub == substitute_index(seed, epoch, index, attempt, n)
    assert sub == oracles.substitute_index(seed, epoch, index, attempt, n)


@PROPERTY
@given(seed=seeds, epoch=epochs, attempt=st.integers(0, 15), train=st.booleans(),
       sizes=st.lists(st.tuples(st.integers(1, 500), st.integers(1, 500)), min_size=2, max_size=12),
       data=st.data())
def test_substitute_sample_is_an_ordinary_sample_of_the_substitute(seed, epoch, attempt, train, sizes,
                                                                    data):
    """The substitute arrives with exactly the crop box and flip it gets as an ordinary
    sample of this epoch (from its own index and size), not the bad record's."""
    index = data.draw(st.integers(0, len(sizes) - 1))
    spec = AugmentSpec(size=(24, 24), train=train)
    hw = np.array(sizes, dtype=np.int64)
    sub, box, flip = substitute_sample(spec, seed, epoch, index, attempt, hw)
    assert sub == oracles.substitute_index(seed, epoch, index, attempt, len(sizes))
    h, w = sizes[sub]
    if train:
        want_box, want_flip = oracles.train_params(seed, epoch, sub, h, w)
    else:
        want_box, want_flip = tuple(center_crop([h], [w], (24, 24))[0].tolist()), False
    assert tuple(box.tolist()) == want_box and flip is want_flip
    assume(sizes[sub] != sizes[index])
