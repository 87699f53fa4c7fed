"""size= as a callable epoch -> size (progressive resizing): each epoch at its size, the
ring reallocated when the size changes and the old one freed, resume and eval unaffected."""
from __future__ import annotations

import gc
import weakref

import pytest
import torch

from feedline import FeedLoader
from feedline.planning.size_schedule import ProgressiveSize, SizeSchedule, schedule_of

pytestmark = pytest.mark.turbojpeg   # the decoder these tests run on (the turbojpeg extra)

SIZES = {0: 32, 1: 48, 2: 64, 3: 32, 4: 48, 5: 64}


def loader(path, **kw):
    options = dict(batch_size=8, shuffle=True, num_workers=2, device="cpu", seed=3, decoder="turbojpeg",
                   size=lambda epoch: SIZES[epoch])
    options.update(kw)
    return FeedLoader(str(path), **options)


def test_each_epoch_has_its_size(packed_lmdb):
    with loader(packed_lmdb) as feed:
        for epoch in range(4):
            shapes = {tuple(x.shape[-2:]) for x, _ in feed}
            assert shapes == {(SIZES[epoch], SIZES[epoch])}


def test_the_old_ring_is_freed_when_the_size_changes(packed_lmdb):
    """Memory is one ring at the current size: after each change the previous ring is gone."""
    with loader(packed_lmdb) as feed:
        rings = []
        for epoch in range(6):
            for x, _ in feed:
                pass
            del x
            rings.append(weakref.ref(feed.source.ring))
            gc.collect()
            assert [r() is not None for r in rings] == [False] * epoch + [True]
            assert feed.source.ring.size == (SIZES[epoch],) * 2


def test_an_epoch_matches_a_fixed_size_loader(packed_lmdb):
    """Epoch 2 of the schedule is epoch 2 of a loader fixed at that size: same crops, same pixels."""
    with loader(packed_lmdb) as scheduled, loader(packed_lmdb, size=SIZES[2]) as fixed:
        scheduled.set_epoch(2)
        fixed.set_epoch(2)
        for (a, ya), (b, yb) in zip(scheduled, fixed):
            assert torch.equal(a, b) and torch.equal(ya, yb)


def test_resume_mid_epoch_keeps_the_size(packed_lmdb):
    with loader(packed_lmdb) as full:
        full.set_epoch(1)
        whole = [x.clone() for x, _ in full]
    with loader(packed_lmdb) as first:
        first.set_epoch(1)
        it = iter(first)
        next(it), next(it)
        state = first.state_dict()
    with loader(packed_lmdb) as resumed:
        resumed.load_state_dict(state)
        rest = [x.clone() for x, _ in resumed]
    assert len(rest) == len(whole) - 2
    assert all(torch.equal(a, b) for a, b in zip(whole[2:], rest))


@pytest.mark.dali
def test_dali_follows_the_schedule(packed_lmdb):
    with loader(packed_lmdb, engine="dali", decoder="auto") as feed:
        for epoch in range(3):
            assert {tuple(x.shape[-2:]) for x, _ in feed} == {(SIZES[epoch],) * 2}


def test_an_object_with_a_size_method_and_progressive_size():
    ramp = ProgressiveSize(160, 224, ramp_epochs=4, start_epoch=1)
    assert [ramp.size(e) for e in range(7)] == [160, 160, 192, 192, 192, 224, 224]  # np.round, as FFCV
    assert schedule_of(ramp).at(3) == (192, 192)
    assert schedule_of(224) is None and schedule_of((224, 160)) is None


def test_a_bad_schedule_says_which_epoch(packed_lmdb):
    with pytest.raises(ValueError, match=r"size\(0\) \(the size schedule at epoch 0\) must be a positive int"):
        loader(packed_lmdb, size=lambda epoch: 0)
    with pytest.raises(TypeError, match="size must be an int"):
        SizeSchedule(object())


def test_eval_size_is_independent(packed_lmdb):
    with loader(packed_lmdb) as train, loader(packed_lmdb, size=80, train=False, shuffle=False) as val:
        assert next(iter(train))[0].shape[-1] == 32 and next(iter(val))[0].shape[-1] == 80


def test_the_memory_check_allows_for_the_largest_size_of_the_ramp(packed_lmdb):
    """A ramp whose end does not fit is refused before anything is allocated, at its start."""
    with pytest.raises(MemoryError, match=r"at 20000x20000"):
        loader(packed_lmdb, batch_size=64, size=ProgressiveSize(32, 20000, ramp_epochs=3, step=32))
