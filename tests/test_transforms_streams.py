"""transforms/streams.py: each transform's parameters are a pure function of (seed,
epoch, index) on its own stream: the same in any batch, different across samples, and
unmoved when another transform is added."""
from __future__ import annotations



import numpy as np


from feedline.planning.augment import AugmentSpec, plan
from feedline.transforms import (ColorJitter, GaussianBlur, RandAugment, RandomErasing, RandomGrayscale, SampleTransforms,
                                 TrivialAugmentWide)


N = 20_000

INDICES = np.arange(N)


def test_a_sample_gets_the_same_parameters_in_any_batch():
    ops = SampleTransforms([RandAugment(), ColorJitter(0.4, 0.4, 0.4, 0.1), GaussianBlur(3),
                            RandomErasing(0.5), RandomGrayscale(0.3), TrivialAugmentWide()])
    order = np.random.default_rng(0).permutation(100)
    whole = ops.draw(11, 3, order)
    for split in (1, 7, 64):
        parts = [ops.draw(11, 3, order[i:i + split]) for i in range(0, 100, split)]
        for k, params in enumerate(whole):
            for key, value in params.items():
                assert np.array_equal(np.concatenate([p[k][key] for p in parts]), value)
    again = ops.draw(11, 3, order[::-1])[0]["op"][::-1]
    assert np.array_equal(again, whole[0]["op"])
    other_epoch, other_seed = ops.draw(11, 4, order)[0]["op"], ops.draw(12, 3, order)[0]["op"]
    assert (other_epoch != whole[0]["op"]).mean() > 0.8 and (other_seed != whole[0]["op"]).mean() > 0.8


def test_samples_of_one_batch_get_different_parameters():
    p = ColorJitter(0.4).draw(0, 0, np.arange(32))
    assert len(np.unique(p["factors"][:, 0])) == 32


def test_adding_a_transform_moves_neither_the_crop_nor_another_transforms_parameters():
    alone = SampleTransforms([RandAugment()]).draw(1, 0, INDICES[:500])[0]
    with_more = SampleTransforms([ColorJitter(0.4), RandomErasing(), RandAugment(),
                                  GaussianBlur(3)]).draw(1, 0, INDICES[:500])[2]
    for key in alone:
        assert np.array_equal(alone[key], with_more[key])
    twice = SampleTransforms([RandAugment(), RandAugment()]).draw(1, 0, INDICES[:500])
    assert (twice[0]["op"] != twice[1]["op"]).mean() > 0.8  # a second copy draws afresh
    spec = AugmentSpec(size=64)
    h, w = np.full(500, 300), np.full(500, 400)
    boxes, flips = plan(spec, 1, 0, INDICES[:500], h, w)
    streams = SampleTransforms([RandAugment(), ColorJitter(0.4)]).streams
    assert 0 not in streams and 0x5B57 not in streams
    assert np.array_equal(plan(spec, 1, 0, INDICES[:500], h, w)[0], boxes)
