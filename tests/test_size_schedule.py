"""Size schedules: ProgressiveSize's sizes() names every size its epochs take, so the memory
check (which sees only sizes()) allows for the largest, however late the ramp starts."""
from __future__ import annotations

import pytest

from feedline import FeedLoader
from feedline.planning.size_schedule import ProgressiveSize


@pytest.mark.parametrize("start_epoch", [0, 2, 7])
def test_sizes_are_every_size_the_epochs_take(start_epoch):
    ramp = ProgressiveSize(64, 224, ramp_epochs=3, start_epoch=start_epoch, step=32)
    taken = {ramp.size(e) for e in range(start_epoch + 20)}
    assert ramp.sizes() == taken and max(ramp.sizes()) == 224


def test_the_memory_check_sees_the_end_of_a_ramp_that_starts_late(packed_lmdb):
    with pytest.raises(MemoryError, match=r"at 20000x20000"):
        FeedLoader(str(packed_lmdb), batch_size=64, train=True, device="cpu", decoder="opencv",
                   size=ProgressiveSize(32, 20000, ramp_epochs=3, start_epoch=2, step=32))
