"""The scale benchmarks' own parts: the store written from memory reads as a packed one,
the class-mix count, page-cache helpers, and each script end to end on tiny data
(bench/scale.py, bench/cold_cache.py). Nothing is timed here."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import cold_cache, scale  # noqa: E402
from bench.cold_pages import NullDecoder, resident_fraction, warm  # noqa: E402
from bench.scale_store import CLASSES, jpeg_pool, label_of, path_of, write_store  # noqa: E402
from feedline import FeedLoader, open_dataset  # noqa: E402
from feedline.dataset.verify import verify  # noqa: E402


@pytest.fixture(scope="module")
def pool():
    return jpeg_pool(size=7, seed=3)


@pytest.mark.parametrize("ext", ["lmdb", "h5"])
def test_a_store_written_from_memory_reads_as_a_packed_one(pool, tmp_path, ext):
    n = 2500   # three commits of 1,000 and a short one; more records than classes
    written = write_store(str(tmp_path / f"s.{ext}"), n, pool)
    assert written.records == n and written.bytes == sum(len(pool[i % 7]) for i in range(n))
    with open_dataset(written.path) as store:
        assert len(store) == n and len(store.classes) == CLASSES
        assert np.all(np.diff(store.labels) >= 0) and int(store.labels[-1]) == CLASSES - 1   # class by class
        for i in (0, 1, 999, 1000, 1001, n - 1):
            assert bytes(store.read_checked(i)) == pool[i % 7]
            assert store.path(i) == path_of(i, n) and store.label(i) == label_of(i, n)
            assert store.size(i) == (48, 64)
    report = verify(written.path)
    assert report.ok, report


def test_class_mix_counts_the_classes_of_each_batch():
    labels = np.repeat(np.arange(8), 32)   # 8 classes of 32 neighbouring records
    mix = cold_cache.class_mix(labels, block=32, window=1, batch=32)
    assert mix["quasi_random"] == 1.0      # a window is one block: one class per batch
    assert 4 < mix["random"] <= 8
    wide = cold_cache.class_mix(labels, block=32, window=8, batch=32)
    assert wide["quasi_random"] > 4        # a window of every block mixes as random order does


def test_a_warmed_file_is_resident(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(256)) * 4096)
    warm([str(path)])
    assert resident_fraction([str(path)]) == 1.0


def test_the_null_decoder_still_reads_and_checks_every_record(packed_lmdb):
    with FeedLoader(str(packed_lmdb), batch_size=8, shuffle=True, size=8, seed=2, num_workers=2,
                    decoder=NullDecoder()) as loader:
        labels = torch.cat([y for _, y in loader])
    with open_dataset(str(packed_lmdb)) as store:
        assert sorted(labels.tolist()) == sorted(store.labels.tolist())


def test_scale_bench_end_to_end_on_small_stores(tmp_path):
    out = tmp_path / "scale.json"
    assert scale.main(["--records", "1600", "--small", "800", "--batches", "1", "--cache-dir", str(tmp_path),
                       "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = {(r["format"], r["records"]): r for r in result["results"]}
    assert sorted(rows) == [("hdf5", 800), ("hdf5", 1600), ("lmdb", 800), ("lmdb", 1600)]
    for row in rows.values():
        assert row["held_bytes_per_record"] > 8 and row["first_batch_random_s"] > 0 and row["write_s"] > 0
    assert len(result["targets"]) == 14 and all(t["measured"] is not None for t in result["targets"])


def test_cold_cache_bench_end_to_end_on_a_given_store(packed_lmdb, tmp_path):
    out = tmp_path / "cold.json"
    assert cold_cache.main([str(packed_lmdb), "--quick", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = {(r["setting"], r["cache"]) for r in result["results"]}
    assert ("read: random", "cold") in rows and ("decode: random", "warm") in rows
    for row in result["results"]:
        assert row["runs"][0]["images"] == 48
    assert {m["data"] for m in result["class_mix"]} == {"this data set", "ImageNet-like"}
