"""FeedLoader's documented surface that mutation testing found unpinned (tests/MUTATION.md):
its defaults, DataLoader's options, where it stands after a break or a full epoch, the saved
state's keys and versions, its stats, and the bad-record ledger's one-line summary."""
from __future__ import annotations

import logging
import time

import pytest
import torch

from feedline import FeedLoader
from feedline.choices import Engine, OnError, Order
from feedline.errors import BackendUnavailable
from feedline.ledger import CHECKSUM, UNDECODABLE, BadRecord, BadRecordLedger
from storefiles import make_records, write_lmdb

STATE_KEYS = {"version", "epoch", "batch", "seed", "order", "batch_size", "drop_last", "world_size",
              "even_shards", "quasi_random", "samples"}


def small(path, **kw) -> FeedLoader:
    options = dict(batch_size=10, shuffle=True, size=32, num_threads=2, device="cpu", seed=7, decoder="opencv")
    options.update(kw)
    return FeedLoader(str(path), **options)


def epoch_batches(loader, epoch):
    loader.set_epoch(epoch)
    return [(x.clone(), y.clone()) for x, y in loader]


def assert_same(got, want):
    assert len(got) == len(want) > 0
    for (x, y), (wx, wy) in zip(got, want):
        assert torch.equal(y, wy) and torch.equal(x, wx)


@pytest.fixture(scope="module")
def reference(packed_lmdb):
    """Epochs 0, 1 and 2 of an uninterrupted loader."""
    loader = small(packed_lmdb)
    return {epoch: epoch_batches(loader, epoch) for epoch in (0, 1, 2)}


# -- defaults and DataLoader's options --------------------------------------------------------

def test_defaults_are_the_documented_ones(packed_lmdb):
    c = FeedLoader(str(packed_lmdb), device="cpu").config
    assert (c.seed, c.batch_size, c.order, c.on_error, c.drop_last) == (0, 256, Order.SEQUENTIAL, OnError.RAISE,
                                                                        False)
    assert (c.prefetch, c.rank, c.world_size, c.even_shards, c.pin_memory) == (2, 0, 1, True, False)
    assert c.augment.train and c.augment.size == (224, 224) and c.augment.flip
    assert c.engine is Engine.THREADS and c.decoder not in ("auto", None)  # a CPU decoder, resolved


def test_num_workers_sets_the_threads_unless_they_are_given(packed_lmdb):
    assert FeedLoader(str(packed_lmdb), device="cpu", num_workers=3).config.num_threads == 3
    assert FeedLoader(str(packed_lmdb), device="cpu", num_workers=3, num_threads=1).config.num_threads == 1


def test_prefetch_sizes_the_ring(packed_lmdb):
    """ThreadBatches keeps prefetch + 2 batch buffers, allocated once."""
    assert small(packed_lmdb, prefetch=1).source.ring.slots == 3
    assert small(packed_lmdb, prefetch=4).source.ring.slots == 6


def test_order_decides_and_shuffle_must_agree_with_it(packed_lmdb):
    loader = small(packed_lmdb, shuffle=None, order="sequential", batch_size=48)
    [(_, labels)] = list(loader)
    assert labels.tolist() == loader.store.labels.tolist()   # the records' own order
    assert small(packed_lmdb, order="quasi-random").config.order is Order.QUASI_RANDOM
    with pytest.raises(ValueError, match="shuffle=False and order='random' disagree.*pass shuffle=True"):
        small(packed_lmdb, shuffle=False, order="random")
    with pytest.raises(ValueError, match="shuffle=True and order='sequential' disagree.*pass shuffle=False"):
        small(packed_lmdb, shuffle=True, order="sequential")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error given where CUDA is missing")
def test_a_cuda_device_without_cuda_is_a_clear_error(packed_lmdb):
    with pytest.raises(Exception, match="CUDA is not available"):
        small(packed_lmdb, device="cuda")


def test_the_gpu_engine_on_a_cpu_device_is_a_clear_error(packed_lmdb):
    with pytest.raises(BackendUnavailable, match="engine='gpu' decodes on a CUDA device"):
        small(packed_lmdb, engine="gpu", decoder="auto", device="cpu")


def test_one_record_loads_and_no_record_is_a_clear_error(tmp_path):
    one = write_lmdb(tmp_path / "one.lmdb", make_records(1, 1))
    assert [tuple(x.shape) for x, _ in small(one, batch_size=4)] == [(1, 3, 32, 32)]
    empty = write_lmdb(tmp_path / "empty.lmdb", make_records(0, 1))
    with pytest.raises(ValueError, match=r"empty\.lmdb: the data set is empty"):
        small(empty)


def test_repr_says_what_the_loader_reads_and_how(packed_lmdb):
    loader = small(packed_lmdb, batch_size=16)
    assert repr(loader) == (f"FeedLoader({loader.store.filename!r}, batch_size=16, engine='threads', decoder='opencv', "
                            "threads=2, device='cpu', 3 batches/epoch)")


# -- where the loader stands --------------------------------------------------------------------

def test_iterating_again_after_a_break_starts_the_next_epoch(packed_lmdb, reference):
    loader = small(packed_lmdb)
    loader.set_epoch(0)
    for k, _ in enumerate(loader):
        if k == 1:
            break
    assert_same([(x.clone(), y.clone()) for x, y in loader], reference[1])


def test_set_epoch_after_a_break_restarts_that_epoch(packed_lmdb, reference):
    loader = small(packed_lmdb)
    loader.set_epoch(1)
    for k, _ in enumerate(loader):
        if k == 2:
            break
    assert_same(epoch_batches(loader, 1), reference[1])


def test_after_a_full_epoch_the_state_points_at_the_next_one(packed_lmdb, reference):
    loader = small(packed_lmdb)
    assert_same(epoch_batches(loader, 1), reference[1])
    state = loader.state_dict()
    assert set(state) == STATE_KEYS and (state["epoch"], state["batch"]) == (2, 0)
    resumed = small(packed_lmdb)
    resumed.load_state_dict(state)
    assert_same([(x.clone(), y.clone()) for x, y in resumed], reference[2])


def test_a_version_1_state_resumes_with_shuffle_as_order(packed_lmdb, reference):
    state = {"version": 1, "epoch": 1, "batch": 2, "seed": 7, "shuffle": True, "batch_size": 10,
             "world_size": 1, "samples": 48}
    loader = small(packed_lmdb)
    loader.load_state_dict(state)
    assert_same([(x.clone(), y.clone()) for x, y in loader], reference[1][2:])
    with pytest.raises(ValueError, match=r"order='random', this one has 'sequential'"):
        small(packed_lmdb, shuffle=False).load_state_dict(state)


def test_resume_refusals_name_what_differs_and_what_to_do(packed_lmdb):
    state = small(packed_lmdb).state_dict()
    with pytest.raises(ValueError, match=r"the saved loader had seed=7, this one has 8"):
        small(packed_lmdb, seed=8).load_state_dict(state)
    with pytest.raises(ValueError, match=r"version 9; this feedline reads versions 1, 2 \(it writes 2\)\. "
                                         r"Resume with the feedline that saved it, or start the epoch afresh$"):
        small(packed_lmdb).load_state_dict({**state, "version": 9})


# -- stats --------------------------------------------------------------------------------------

def test_stats_count_the_epoch_and_the_consumers_wait(packed_lmdb):
    loader = small(packed_lmdb)
    assert loader.stats.bad_records == [] and loader.stats.images == 0
    started = time.perf_counter()
    batches = sum(1 for _ in loader)
    elapsed = time.perf_counter() - started
    s = loader.stats
    assert (s.images, s.batches) == (48, batches) and batches == len(loader) == 5
    assert 0 < s.wait_s <= elapsed   # the consumer's time inside next(): part of the epoch's time


# -- the bad-record ledger ----------------------------------------------------------------------

def bad(index, reason=UNDECODABLE, substitute=None, batch=0, position=None):
    return BadRecord(epoch=3, batch=batch, position=index if position is None else position, index=index,
                     path=f"a/{index}.jpg", reason=reason, detail="broken", substitute=substitute)


def test_a_bad_record_reads_as_where_why_and_what_replaced_it():
    assert str(bad(4, substitute=9)) == "record 4 (a/4.jpg): cannot decode, replaced by record 9"
    assert str(bad(4, CHECKSUM)) == "record 4 (a/4.jpg): checksum mismatch"
    assert str(bad(4, substitute=0)).endswith("replaced by record 0")


def test_the_ledger_summary_is_one_line_with_counts_and_the_first_few():
    ledger = BadRecordLedger()
    for i in range(7):
        ledger.add(bad(i, CHECKSUM if i < 2 else UNDECODABLE, substitute=i + 10))
    line = ledger.summary("data.lmdb")
    assert line.startswith("data.lmdb: epoch 3: 7 bad record(s) (5 cannot decode, 2 checksum mismatch): ")
    assert "; ".join(str(bad(i, CHECKSUM if i < 2 else UNDECODABLE, substitute=i + 10)) for i in range(5)) in line
    assert "record 5 " not in line and line.count("; and 2 more.") == 1
    assert line.endswith("Check the file with `feedline verify`; loader.stats.bad_records lists them all")
    assert "\n" not in line and ledger.substituted == 7 and len(ledger) == 7

    few = BadRecordLedger()
    few.add(bad(1, substitute=None))
    few.add(bad(2, substitute=5))
    assert few.summary("x.h5", shown=2) == (
        "x.h5: epoch 3: 2 bad record(s) (2 cannot decode): record 1 (a/1.jpg): cannot decode; "
        "record 2 (a/2.jpg): cannot decode, replaced by record 5. "
        "Check the file with `feedline verify`; loader.stats.bad_records lists them all")
    assert few.substituted == 1
    assert BadRecordLedger().summary("e.h5").startswith("e.h5: epoch ?: 0 bad record(s) ()")


def test_the_ledger_keeps_the_last_word_per_place_in_epoch_order():
    ledger = BadRecordLedger()
    ledger.add(bad(5, batch=1, position=0, substitute=None))
    ledger.add(bad(2, batch=0, position=3, substitute=7))
    ledger.add(bad(5, batch=1, position=0, substitute=8))   # the source redid it with a substitute
    assert [(r.index, r.substitute) for r in ledger.records()] == [(2, 7), (5, 8)]
    assert len(ledger) == 2 and ledger.substituted == 2


# -- the class-sorted warning of quasi-random order ---------------------------------------------

def labelled_store(path, labels: list[int]) -> str:
    records = make_records(len(labels), max(labels) + 1)
    records.labels = list(labels)
    return write_lmdb(path, records)


def quasi_random_warnings(store: str, quasi_random, caplog) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="feedline"):
        small(store, batch_size=4, order="quasi-random", quasi_random=quasi_random).close()
    return [r.getMessage() for r in caplog.records if "quasi-random" in r.getMessage()]


def test_quasi_random_warns_only_when_windows_are_smaller_than_a_class_sorted_store(tmp_path, caplog):
    sorted_store = labelled_store(tmp_path / "sorted.lmdb", [0] * 6 + [1] * 6)
    assert quasi_random_warnings(sorted_store, (2, 2), caplog) == [
        f"{sorted_store}: order='quasi-random' reads windows of 4 records from a store packed class by class, "
        "so each batch holds few classes, which costs accuracy. Pack it in a shuffled order (`feedline pack "
        "SRC OUT --shuffle SEED`), or use order='random' if it fits in memory"]
    assert len(quasi_random_warnings(sorted_store, (1, 11), caplog)) == 1   # one record short of the store
    assert quasi_random_warnings(sorted_store, (3, 4), caplog) == []       # a window holds the whole store
    assert quasi_random_warnings(sorted_store, (4, 4), caplog) == []


def test_class_sorted_means_at_least_half_the_neighbours_share_a_label(tmp_path, caplog):
    half = labelled_store(tmp_path / "half.lmdb", [0, 0, 1, 1, 2])         # 2 of 4 neighbour pairs equal
    quarter = labelled_store(tmp_path / "quarter.lmdb", [0, 0, 1, 2, 3])  # 1 of 4
    assert len(quasi_random_warnings(half, (1, 2), caplog)) == 1
    assert quasi_random_warnings(quarter, (1, 2), caplog) == []
    assert quasi_random_warnings(labelled_store(tmp_path / "mixed.lmdb", [0, 1] * 6), (2, 2), caplog) == []


def test_other_orders_never_warn_about_class_sorted_stores(tmp_path, caplog):
    store = labelled_store(tmp_path / "sorted.lmdb", [0] * 6 + [1] * 6)
    for order in ("random", "sequential"):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="feedline"):
            small(store, shuffle=order != "sequential", order=order, quasi_random=(2, 2)).close()
        assert caplog.records == [], order


def test_quasi_random_batches_are_windows_of_the_given_blocks(tmp_path):
    """Blocks of 2 neighbouring records, windows of 2 blocks: with batches of 4, every batch
    is one window, the records of two whole blocks (each record's label is its index)."""
    store = labelled_store(tmp_path / "own_labels.lmdb", list(range(12)))
    loader = small(store, batch_size=4, order="quasi-random", quasi_random=(2, 2))
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        seen = []
        for _, labels in loader:
            blocks = sorted({int(i) // 2 for i in labels})
            assert len(blocks) == 2 and sorted(labels.tolist()) == [i for b in blocks for i in (2 * b, 2 * b + 1)]
            seen += labels.tolist()
        assert sorted(seen) == list(range(12)) and seen != list(range(12))
