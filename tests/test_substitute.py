"""Substitutes for bad records: pure functions of (seed, epoch, index, attempt), against the
documented rule written out in tests/oracles.py."""
from __future__ import annotations

import numpy as np
import pytest

import oracles
from feedline.planning.augment import AugmentSpec, plan
from feedline.sources.substitute import substitute_index, substitute_sample


@pytest.mark.parametrize("n", [2, 3, 7, 100, 12345])
def test_substitute_index_equals_the_oracle(n):
    for seed, epoch in [(0, 0), (5, 2), (2**40, 77)]:
        for index in sorted({0, 1, n // 2, n - 2, n - 1}):
            for attempt in range(4):
                got = substitute_index(seed, epoch, index, attempt, n)
                assert got == oracles.substitute_index(seed, epoch, index, attempt, n)


def test_substitute_is_another_record_in_range_and_deterministic():
    n = 7
    for index in range(n):
        picks = [substitute_index(5, 2, index, attempt, n) for attempt in range(20)]
        assert picks == [substitute_index(5, 2, index, attempt, n) for attempt in range(20)]
        assert all(isinstance(p, int) and 0 <= p < n and p != index for p in picks)
        assert len(set(picks)) > 1  # attempts move on


def test_substitutes_cover_the_other_records_uniformly():
    """Over many epochs, the substitute of record 3 among 6 is each of the other 5 about a
    fifth of the time, and never record 3."""
    epochs = 5000
    counts = np.bincount([substitute_index(0, e, 3, 0, 6) for e in range(epochs)], minlength=6)
    assert counts[3] == 0
    others = np.delete(counts, 3)
    expected = epochs / 5
    chi2 = float(((others - expected) ** 2 / expected).sum())
    assert chi2 < 25, counts   # 4 degrees of freedom: 25 is beyond p = 0.0001
    # the first and the last record are reachable too, for the first and the last bad record
    assert {substitute_index(1, e, 0, 0, 4) for e in range(200)} == {1, 2, 3}
    assert {substitute_index(1, e, 3, 0, 4) for e in range(200)} == {0, 1, 2}


def test_substitute_depends_on_seed_epoch_and_attempt():
    n = 1000
    base = [substitute_index(1, 1, i, 0, n) for i in range(50)]
    for other in ([substitute_index(2, 1, i, 0, n) for i in range(50)],
                  [substitute_index(1, 2, i, 0, n) for i in range(50)],
                  [substitute_index(1, 1, i, 1, n) for i in range(50)]):
        assert sum(a != b for a, b in zip(base, other)) > 40


def test_substitute_draws_are_not_the_crop_draws():
    """The substitute stream is its own: the pick is not a function of the record's crop draws."""
    n, k = 1000, 400
    crop_draw = np.array([oracles.uniform(0, 0, i, 0) for i in range(k)])
    picks = np.array([substitute_index(0, 0, i, 0, n) for i in range(k)])
    assert abs(np.corrcoef(crop_draw, picks)[0, 1]) < 0.2


def test_two_records_and_too_few():
    assert substitute_index(1, 1, 0, 0, 2) == 1 and substitute_index(1, 1, 1, 3, 2) == 0
    with pytest.raises(ValueError, match="1 record"):
        substitute_index(0, 0, 0, 0, 1)
    with pytest.raises(ValueError, match="attempt"):
        substitute_index(0, 0, 0, -1, 4)


@pytest.mark.parametrize("train", [True, False])
def test_substitute_sample_has_the_crop_and_flip_of_an_ordinary_sample(train):
    spec = AugmentSpec(size=(32, 32), train=train)
    sizes = np.array([[100, 120], [90, 60], [300, 200], [50, 50], [17, 400]])
    for seed, epoch, index, attempt in [(9, 4, 0, 0), (1, 2, 3, 1), (0, 0, 4, 5), (3, 8, 2, 2)]:
        sub, box, flip = substitute_sample(spec, seed, epoch, index, attempt, sizes)
        assert sub == substitute_index(seed, epoch, index, attempt, len(sizes)) and sub != index
        boxes, flips = plan(spec, seed, epoch, [sub], sizes[[sub], 0], sizes[[sub], 1])
        assert box.tolist() == boxes[0].tolist() and flip == bool(flips[0])
        assert isinstance(flip, bool)
        if train:   # and that is torchvision's crop of the substitute's own size
            want_box, want_flip = oracles.train_params(seed, epoch, sub, *sizes[sub].tolist())
            assert tuple(box.tolist()) == want_box and flip == want_flip
