"""The host path of both CPU engines: decode threads or worker processes write into the
tensors the consumer receives, reused from a ring while nobody holds them, never
overwritten while anybody does; the epoch's order is computed once."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from feedline import FeedLoader, OrderSpec, OutputSpec
from feedline.planning.plan import EpochPlan

KW = dict(batch_size=8, size=32, num_workers=2, device="cpu", decoder="opencv", shuffle=True, seed=5)


def epoch_batches(loader, epoch, keep=None):
    """(data pointer, clone) of each batch of ``epoch``; ``keep(x)`` may hold on to something."""
    loader.set_epoch(epoch)
    got = []
    for x, y in loader:
        got.append((x.data_ptr(), x.clone(), y.clone()))
        if keep is not None:
            keep(x)
    return got


ENGINES = pytest.mark.parametrize("engine", ["threads", "processes"])


@ENGINES
def test_a_consumer_that_lets_go_gets_the_ring_again_with_the_right_pixels(packed_lmdb, engine):
    """Batches come from the ring's few slots, epoch after epoch (no new memory, no copy),
    and hold the same values as batches that were each kept (each then a new tensor)."""
    with FeedLoader(str(packed_lmdb), engine=engine, **KW) as reused, \
            FeedLoader(str(packed_lmdb), engine=engine, **KW) as kept:
        got = epoch_batches(reused, 0) + epoch_batches(reused, 1)
        held = []
        want = epoch_batches(kept, 0, held.append) + epoch_batches(kept, 1, held.append)
        assert reused.source.ring.fresh == 0
        assert kept.source.ring.fresh == len(want) - kept.source.ring.slots
    assert len(got) == len(want) == 12
    assert len({ptr for ptr, _, _ in got}) <= reused.source.ring.slots
    assert len({ptr for ptr, _, _ in want}) == len(want)
    for (_, x, y), (_, wx, wy) in zip(got, want, strict=True):
        assert torch.equal(y, wy) and torch.equal(x, wx)


@ENGINES
@pytest.mark.parametrize("hold", ["view", "numpy", "row"])
def test_anything_still_sharing_a_batchs_memory_keeps_it_intact(packed_lmdb, hold, engine):
    """A view, a numpy array or one row of a batch, kept after the batch itself is dropped,
    still reads what was delivered: the ring gives that slot new tensors instead."""
    make = {"view": lambda x: x[:2], "numpy": lambda x: x.numpy(), "row": lambda x: x[3].permute(1, 2, 0)}[hold]
    with FeedLoader(str(packed_lmdb), engine=engine, **KW) as loader:
        it = iter(loader)
        x, _ = next(it)
        part = make(x)
        copy = (part.numpy() if isinstance(part, torch.Tensor) else part).copy()
        del x
        rest = [y.clone() for _, y in it]
        assert len(rest) == 5 and loader.source.ring.fresh >= 1
    assert np.array_equal(part.numpy() if isinstance(part, torch.Tensor) else part, copy)


def test_uint8_batches_are_the_decoded_pixels_in_place(packed_lmdb):
    """mean=None: the decoder writes straight into the delivered batch (channels_last uint8),
    and the pixels equal the normalized batch's, undone."""
    common = dict(KW, shuffle=False)   # channels_last: the in-place path, rows are H x W x C
    with FeedLoader(str(packed_lmdb), output=OutputSpec(mean=None, std=None, channels_last=True), **common) as raw, \
            FeedLoader(str(packed_lmdb), output=OutputSpec(mean=(0, 0, 0), std=(1, 1, 1), channels_last=True),
                       **common) as scaled:
        for (x, y), (f, fy) in zip(raw, scaled, strict=True):
            assert x.dtype == torch.uint8 and x.is_contiguous(memory_format=torch.channels_last)
            assert torch.equal(y, fy)
            assert torch.equal(x, (f * 255).round().to(torch.uint8))


def test_the_epochs_order_is_computed_once_per_epoch(packed_lmdb, monkeypatch):
    """Quasi-random order with read-ahead: the plans and the read-ahead share one permutation."""
    calls = []
    samples = EpochPlan.samples

    def counted(self, n):
        calls.append(self.epoch)
        return samples(self, n)

    monkeypatch.setattr(EpochPlan, "samples", counted)
    with FeedLoader(str(packed_lmdb), order=OrderSpec("quasi-random", quasi_random=(4, 2)), **KW) as loader:
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            assert sum(len(y) for _, y in loader) == 48
    assert calls == [0, 1]

HUGE_PAGE = 2 << 20


def vm_flags(address: int) -> tuple[int, int, set[str]]:
    """(start, end, VmFlags) of this process's memory mapping that holds ``address``."""
    span = None
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                span = (lo, hi) if lo <= address < hi else None
            elif line.startswith("VmFlags:") and span is not None:
                return span[0], span[1], set(line.split()[1:])
    raise AssertionError(f"no mapping holds {address:#x}")


def test_fresh_host_batches_ask_for_huge_pages(packed_lmdb):
    """Each batch the host ring allocates is advised MADV_HUGEPAGE over every whole
    2 MiB page it covers (the kernel marks such a mapping 'hg'), and over nothing else. (The
    worker engine's batches are shared memory, whose huge pages are the system's choice:
    /sys/kernel/mm/transparent_hugepage/shmem_enabled.)"""
    loader = FeedLoader(str(packed_lmdb), batch_size=8, size=224, num_workers=2, device="cpu", decoder="opencv",
                        engine="threads")
    batches = [x for x, _ in loader]
    assert len(batches) == 6
    for x in batches:
        begin, size = x.data_ptr(), x.untyped_storage().nbytes()
        first = -(-begin // HUGE_PAGE) * HUGE_PAGE
        last = (begin + size) // HUGE_PAGE * HUGE_PAGE
        assert last - first >= HUGE_PAGE, "a 224 x 224 float batch of 8 covers whole huge pages"
        lo, hi, flags = vm_flags(first)
        assert "hg" in flags and lo <= first and last <= hi, "the batch's whole huge pages are advised"
        if lo < first:   # the mapping was split at the advised range: what precedes it is not advised
            assert lo == first or "hg" not in vm_flags(first - 1)[2]
