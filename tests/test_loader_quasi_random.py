"""Quasi-random order through FeedLoader: its batches are windows of the given blocks, and the
warning about a store packed class by class comes exactly when a window is smaller than it."""
from __future__ import annotations

import logging

from loader_helpers import small

from feedline import OrderSpec
from storefiles import make_records, write_lmdb


def labelled_store(path, labels: list[int]) -> str:
    records = make_records(len(labels), max(labels) + 1)
    records.labels = list(labels)
    return write_lmdb(path, records)


def quasi_random_warnings(store: str, quasi_random, caplog) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="feedline"):
        small(store, batch_size=4, order=OrderSpec("quasi-random", quasi_random=quasi_random)).close()
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
            small(store, shuffle=order != "sequential", order=OrderSpec(order, quasi_random=(2, 2))).close()
        assert caplog.records == [], order


def test_quasi_random_batches_are_windows_of_the_given_blocks(tmp_path):
    """Blocks of 2 neighbouring records, windows of 2 blocks: with batches of 4, every batch
    is one window, the records of two whole blocks (each record's label is its index)."""
    store = labelled_store(tmp_path / "own_labels.lmdb", list(range(12)))
    loader = small(store, batch_size=4, order=OrderSpec("quasi-random", quasi_random=(2, 2)))
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        seen = []
        for _, labels in loader:
            blocks = sorted({int(i) // 2 for i in labels})
            assert len(blocks) == 2 and sorted(labels.tolist()) == [i for b in blocks for i in (2 * b, 2 * b + 1)]
            seen += labels.tolist()
        assert sorted(seen) == list(range(12)) and seen != list(range(12))
