"""Read-ahead: where each store's records lie in its files (the ranges a hint advises), the
schedule of hints of a page-aware epoch, and that hints change nothing a loader yields."""
from __future__ import annotations

import threading

import numpy as np

import pytest

import torch

from layout_helpers import file_bytes, plan, records, stores  # noqa: F401 (fixtures)

from feedline import FeedLoader, OrderSpec, open_dataset

from feedline.core.choices import Order

from feedline.planning.plan import EpochPlan

from feedline.sources.readahead import NoReadAhead, ReadAhead, Schedule, page_aware_sizes, read_ahead

from feedline.stores import ShardedStore, Store

from feedline.stores.advice import MERGE_GAP


def first_seen(samples, block):
    seen = {}
    for position, record in enumerate(samples.tolist()):
        seen.setdefault(record // block, position)
    return seen

class RecordingStore(Store):
    """A real store read through, which also notes each run the read-ahead places for a
    hint (and how far the epoch was planned then)."""

    def __init__(self, store, ahead_of=None):
        self.store, self.ahead_of = store, ahead_of
        self.filename, self.kind, self.classes = store.filename, store.kind, store.classes
        self.meta, self.columns = store.meta, store.columns
        self.hints: list[tuple[int, int, int]] = []
        self.hinted = threading.Event()

    def read(self, index):
        return self.store.read(index)

    def byte_ranges(self, first, stop):
        if threading.current_thread().name == "feedline-readahead":
            planned = self.ahead_of._planned if self.ahead_of is not None else -1
            self.hints.append((first, stop, planned))
            self.hinted.set()
        return self.store.byte_ranges(first, stop)

def wait_until(condition, what: str, limit_s: float = 60.0) -> None:
    event = threading.Event()
    for _ in range(int(limit_s / 0.01)):
        if condition():
            return
        event.wait(0.01)
    raise AssertionError(f"gave up waiting for {what}")

class HintedFirst(RecordingStore):
    """Reads wait for the first hint, so a loader that never advises fails here, at once."""

    def read_checked(self, index):
        if not self.hinted.wait(60):
            raise AssertionError("the loader read a record before any read-ahead hint")
        return self.store.read_checked(index)


@pytest.mark.parametrize("kind", ["lmdb-photos", "lmdb-mixed", "hdf5", "sharded"])
def test_each_record_is_found_at_the_range_its_store_names(stores, kind):
    with open_dataset(stores[kind]) as store:
        for i in range(len(store)):
            (path, offset, length), = store.byte_ranges(i, i + 1)
            assert path in store.files()
            assert file_bytes(path, offset, length) == bytes(store.read(i))


@pytest.mark.parametrize("kind", ["lmdb-photos", "lmdb-mixed", "hdf5", "sharded"])
def test_a_span_of_records_is_covered_by_few_ranges_in_file_order(stores, kind):
    with open_dataset(stores[kind]) as store:
        n = len(store)
        ranges = store.byte_ranges(3, n - 2)
        for i in range(3, n - 2):
            (path, offset, length), = store.byte_ranges(i, i + 1)
            assert any(p == path and o <= offset and offset + length <= o + ln for p, o, ln in ranges), i
        for (p1, o1, l1), (p2, o2, _) in zip(ranges, ranges[1:]):
            assert p1 != p2 or o1 + l1 + MERGE_GAP < o2   # merged unless far apart
        assert len(ranges) <= (2 if kind == "sharded" else 1)   # records written in order lie together
        assert store.will_need(3, n - 2) == sum(length for _, _, length in ranges)


def test_sharded_ranges_name_each_shard_with_its_own_offsets(stores):
    store = ShardedStore.from_paths(stores["sharded"])
    (path_a, _, _), (path_b, offset_b, length_b) = store.byte_ranges(24, 26)
    assert (path_a, path_b) == tuple(stores["sharded"])
    with open_dataset(stores["sharded"][1]) as second:
        assert second.byte_ranges(0, 1) == [(path_b, offset_b, length_b)]


def test_folders_and_empty_spans_advise_nothing_and_bad_spans_are_refused(stores, photo_folder):
    with open_dataset(str(photo_folder)) as folder:
        assert folder.byte_ranges(0, 5) == [] and folder.will_need(0, 5) == 0
    with open_dataset(stores["hdf5"]) as store:
        assert store.byte_ranges(7, 7) == []
        for first, stop in [(5, 3), (-1, 2), (0, len(store) + 1)]:
            with pytest.raises(IndexError, match="not within"):
                store.byte_ranges(first, stop)


@pytest.mark.parametrize("world", [1, 2, 3])
def test_schedule_advises_each_rank_its_own_records_block_by_block_when_first_read(world):
    n, block = 103, 4
    for rank in range(world):
        samples = plan(rank=rank, world=world, block=block).samples(n)
        schedule = Schedule(samples, block)
        seen = first_seen(samples, block)
        advised = [r for a, b in zip(schedule.first, schedule.stop) for r in range(a, b)]
        assert sorted(set(advised)) == sorted(set(samples.tolist()))   # this rank's records, no other
        for first, stop, due in zip(schedule.first, schedule.stop, schedule.due):
            assert first // block == (stop - 1) // block                # a run stays in its block
            assert due == seen[first // block]                          # due when its block is first read
        assert list(schedule.due) == sorted(schedule.due)
        if world == 1:  # one rank reads whole blocks: one run each
            assert [(a, b) for a, b in zip(schedule.first, schedule.stop)] == \
                   [(k * block, min(n, (k + 1) * block)) for k in sorted(seen, key=seen.get)]


def test_schedule_of_a_resumed_epoch_starts_at_the_resume_position():
    samples = plan().samples(60)
    schedule = Schedule(samples[25:], 4)
    assert set(r for a, b in zip(schedule.first, schedule.stop) for r in range(a, b)) == set(samples[25:].tolist())
    assert schedule.until(0) == 0 and schedule.until(10 ** 9) == len(schedule)
    assert len(Schedule(np.zeros(0, np.int64), 4)) == 0


def test_page_aware_sizes_make_blocks_of_about_two_mib():
    assert page_aware_sizes(80_000) == (26, 256)
    assert page_aware_sizes(3_000) == (699, 256)
    assert page_aware_sizes(10 << 20) == (1, 256)
    with pytest.raises(ValueError):
        page_aware_sizes(0)


@pytest.mark.parametrize("world", [1, 2])
def test_read_ahead_runs_one_window_ahead_of_the_plans_and_advises_every_run_once(stores, world):
    store = RecordingStore(open_dataset(stores["lmdb-photos"]))
    epoch = plan(world=world, block=3, window=2, batch=4)
    samples = epoch.samples(len(store))
    ahead = ReadAhead(store, epoch, 0)
    store.ahead_of = ahead
    window = 3 * 2 // world
    try:
        plans = ahead.follow(epoch.batches(store.labels, store.sizes))
        seen = first_seen(samples, 3)
        schedule = Schedule(samples, 3)
        drawn = [next(plans)]
        wait_until(lambda: len(store.hints) >= schedule.until(len(drawn[0]) + max(window, 4)),
                   "the hints of the first window")
        drawn += list(plans)
        wait_until(lambda: len(store.hints) == len(schedule), "every hint")
    finally:
        ahead.close()
    assert [p.number for p in drawn] == list(range(epoch.count(len(store))))   # plans pass unchanged
    assert [(a, b) for a, b, _ in store.hints] == list(zip(schedule.first.tolist(), schedule.stop.tolist()))
    for first, _, planned in store.hints:   # never further ahead than a window of this rank's samples
        assert seen[first // 3] < max(planned, 0) + max(window, epoch.batch_size)


def test_random_order_and_folders_get_no_read_ahead(stores, photo_folder):
    with open_dataset(stores["hdf5"]) as store:
        assert isinstance(read_ahead(store, plan(order=Order.RANDOM), 0), NoReadAhead)
        for order in (Order.QUASI_RANDOM, Order.SEQUENTIAL):
            with read_ahead(store, plan(order=order), 0) as ahead:
                assert isinstance(ahead, ReadAhead)
    with open_dataset(str(photo_folder)) as folder:
        assert isinstance(read_ahead(folder, plan(), 0), NoReadAhead)


@pytest.mark.parametrize("kind", ["lmdb-photos", "hdf5"])
def test_quasi_random_loader_advises_its_rank_and_yields_the_planned_batches_also_resumed(stores, kind):
    base = open_dataset(stores[kind])
    common = dict(batch_size=4, size=16, shuffle=True, seed=3, num_workers=2, engine="threads",  # reads here:
                  order=OrderSpec("quasi-random", rank=1, world_size=2))   # HintedFirst sees them
    store = HintedFirst(base)
    with FeedLoader(store, **common) as loader:
        full = [(x.clone(), y.clone()) for x, y in loader]
        epoch = EpochPlan(loader.config.augment, 3, 0, Order.QUASI_RANDOM, 4, False, 1, 2)
    mine = set(epoch.samples(len(base)).tolist())
    advised = {r for a, b, _ in store.hints for r in range(a, b)}
    assert advised and advised <= mine                       # this rank's records, no other rank's
    expected = base.labels[epoch.samples(len(base))]
    assert torch.cat([y for _, y in full]).tolist() == expected.tolist()
    with FeedLoader(HintedFirst(base), **common) as first, FeedLoader(HintedFirst(base), **common) as second:
        it = iter(first)
        for _ in range(3):
            next(it)
        state = first.state_dict()
        second.load_state_dict(state)
        rest = list(second)
    assert len(rest) == len(full) - 3
    for (x, y), (fx, fy) in zip(rest, full[3:]):
        assert torch.equal(y, fy) and torch.equal(x, fx)
