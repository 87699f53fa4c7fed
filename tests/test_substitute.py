"""Substitutes for bad records: pure functions of (seed, epoch, index, attempt)."""
from __future__ import annotations

import numpy as np
import pytest

from feedline.augment import AugmentSpec, plan
from feedline.pipeline.substitute import substitute_index, substitute_sample


def test_substitute_is_another_record_in_range_and_deterministic():
    n = 7
    for index in range(n):
        picks = [substitute_index(5, 2, index, attempt, n) for attempt in range(20)]
        assert picks == [substitute_index(5, 2, index, attempt, n) for attempt in range(20)]
        assert all(0 <= p < n and p != index for p in picks)
        assert len(set(picks)) > 1  # attempts move on


def test_substitutes_cover_the_other_records():
    picks = {substitute_index(0, e, 3, 0, 5) for e in range(200)}
    assert picks == {0, 1, 2, 4}


def test_two_records_and_too_few():
    assert substitute_index(1, 1, 0, 0, 2) == 1 and substitute_index(1, 1, 1, 3, 2) == 0
    with pytest.raises(ValueError):
        substitute_index(0, 0, 0, 0, 1)
    with pytest.raises(ValueError):
        substitute_index(0, 0, 0, -1, 4)


def test_substitute_sample_has_its_own_ordinary_crop():
    spec = AugmentSpec(size=(32, 32))
    sizes = np.array([[100, 120], [90, 60], [300, 200], [50, 50]])
    sub, box, flip = substitute_sample(spec, 9, 4, 0, 0, sizes)
    boxes, flips = plan(spec, 9, 4, [sub], sizes[[sub], 0], sizes[[sub], 1])
    assert sub == substitute_index(9, 4, 0, 0, 4)
    assert box.tolist() == boxes[0].tolist() and flip == bool(flips[0])
