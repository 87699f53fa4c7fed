"""One bad-record ledger for every batch source: the thread source and DALI report the same
damaged records of the same store identically (where, which, why, and the substitute)."""
from __future__ import annotations

import shutil

import pytest
import torch

from feedline import FeedLoader

pytestmark = pytest.mark.dali

DAMAGED = ("class_001/img_0000005.jpg", "class_002/img_0000010.jpg")


@pytest.fixture
def damaged_folder(photo_folder, tmp_path):
    """The photo folder with two records that are not JPEGs any more (headers only)."""
    root = tmp_path / "images"
    shutil.copytree(photo_folder, root)
    for rel in DAMAGED:
        (root / rel).write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg" * 10)
    return root


def ledger_rows(loader, epochs=(0, 1)):
    """(epoch, batch, position, index, path, reason, substitute) of every bad record, and
    the labels delivered, over ``epochs``."""
    rows, labels = [], []
    for epoch in epochs:
        loader.set_epoch(epoch)
        labels += [y.clone() for _, y in loader]
        rows += [(r.epoch, r.batch, r.position, r.index, r.path, r.reason, r.substitute)
                 for r in loader.stats.bad_records]
    return rows, labels


def test_thread_and_dali_sources_keep_the_same_ledger(damaged_folder):
    kwargs = dict(batch_size=5, shuffle=True, size=32, num_workers=2, device="cpu", seed=4,
                  on_error="substitute")
    with FeedLoader(str(damaged_folder), decoder="opencv", **kwargs) as threads, \
            FeedLoader(str(damaged_folder), engine="dali", **kwargs) as dali:
        thread_rows, thread_labels = ledger_rows(threads)
        dali_rows, dali_labels = ledger_rows(dali)
    assert len(thread_rows) == 4, "two damaged records, two epochs"
    assert {row[4] for row in thread_rows} == set(DAMAGED)
    assert all(row[5] == "cannot decode" and row[6] is not None for row in thread_rows)
    assert thread_rows == dali_rows
    assert len(thread_labels) == len(dali_labels) > 0
    assert all(torch.equal(a, b) for a, b in zip(thread_labels, dali_labels))


def test_raise_mode_names_the_record_in_both_sources(damaged_folder):
    for engine, decoder in (("threads", "opencv"), ("dali", "auto")):
        loader = FeedLoader(str(damaged_folder), engine=engine, decoder=decoder, batch_size=5, size=32,
                            num_workers=2, device="cpu")
        with pytest.raises(Exception) as info:
            for _ in loader:
                pass
        assert info.value.path in DAMAGED, decoder
        [row] = loader.stats.bad_records
        assert row.path == info.value.path and row.substitute is None and row.reason == "cannot decode"
        loader.close()
