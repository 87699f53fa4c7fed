"""Every field through a real pack and back: LMDB, HDF5, shards and --join keep each record's
targets (checked against the labels file, by path), stores of version 2 still open as before,
and a batch's arrays (``batch_layout`` / ``fill``) hold what the records hold."""
from __future__ import annotations

import json
import os

import lmdb
import numpy as np
import pytest
from storefiles import WRITERS, make_records

import feedline
from converters import join_shards, pack
from feedline.dataset.describe import describe, format_info
from feedline.core.errors import StoreError
from feedline.dataset.format import LMDB_COLUMN_PREFIX, LMDB_META_KEY
from feedline.sample import make_photo_folder
from feedline.dataset.targets import TargetColumns
from feedline.dataset.verify import verify

CLASSES = ["cat", "dog", "emu"]


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """(folder, labels file, {path: expected targets}) of 9 photos with every field."""
    root = tmp_path_factory.mktemp("targets")
    src = str(root / "src")
    make_photo_folder(src, n=9, classes=3, seed=4, sizes=[(96, 64), (64, 96)])
    rels = sorted(os.path.relpath(os.path.join(d, f), src) for d, _, fs in os.walk(src) for f in fs)
    rows, expected = [], {}
    for k, rel in enumerate(rels):
        names = [CLASSES[(k + j) % 3] for j in range(k % 3)]
        boxes = [[j, 2 * j, 10.5 + j, 20 + k, CLASSES[j % 3]] for j in range(k % 4)]
        rows.append({"path": rel, "label": CLASSES[k % 3], "labels": names, "target": [k / 4, -k], "boxes": boxes})
        expected[rel] = {"label": k % 3, "labels": [CLASSES.index(n) for n in names], "target": [k / 4, -k],
                         "boxes": [[*b[:4], CLASSES.index(b[4])] for b in boxes]}
    labels = root / "labels.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return src, str(labels), expected


def targets_by_path(dataset) -> dict:
    with feedline.open_dataset(dataset) as ds:
        return {ds.path(i): ds.targets(i) for i in range(len(ds))}


@pytest.mark.parametrize("ext", ["lmdb", "h5"])
def test_every_field_round_trips_through_a_pack(labelled, tmp_path, ext):
    src, labels, expected = labelled
    out = str(tmp_path / f"o.{ext}")
    pack(src, out, labels_csv=labels, progress=False)
    assert targets_by_path(out) == expected
    with feedline.open_dataset(out) as ds:
        assert ds.meta["format_version"] == 4 and ds.classes == CLASSES
        assert ds.fields == {"label": {}, "labels": {"max": 2}, "target": {"width": 2, "scalar": False},
                             "boxes": {"max": 3}}
        assert ds.labels.tolist() == [expected[ds.path(i)]["label"] for i in range(len(ds))]
    info = describe(out)
    assert info.fields["labels"]["per_image"] == {"min": 0, "mean": 1.0, "max": 2}
    assert info.fields["boxes"]["per_image"] == {"min": 0, "mean": 12 / 9, "max": 3}
    assert info.fields["boxes"]["total"] == 12
    assert info.fields["target"]["min"] == [0.0, -8.0] and info.fields["target"]["max"] == [2.0, 0.0]
    assert "target (2 numbers: 0..2, -8..0), boxes (0-3 per image, mean 1.33, 12 in all)" in format_info(info)


def test_shards_and_join_keep_each_records_targets(labelled, tmp_path):
    src, labels, expected = labelled
    out = str(tmp_path / "s.lmdb")
    pack(src, out, labels_csv=labels, num_shards=3, progress=False)
    assert targets_by_path(out.replace(".lmdb", ".shards.json")) == expected
    # Split across "machines", then joined without repacking.
    other = str(tmp_path / "m" / "s.h5")
    for k in range(2):
        pack(src, other, labels_csv=labels, num_shards=2, shard_index=k, progress=False, resume=True)
    os.remove(other.replace(".h5", ".shards.json"))
    assert targets_by_path(join_shards(other)) == expected
    with feedline.open_dataset(join_shards(other)) as ds:
        assert ds.fields["boxes"]["max"] == 3 and ds.meta["format_version"] == 4


def test_shards_of_other_fields_do_not_join(labelled, tmp_path):
    src, labels, _ = labelled
    pack(src, str(tmp_path / "a.lmdb"), labels_csv=labels, progress=False)
    pack(src, str(tmp_path / "b.lmdb"), progress=False)
    with pytest.raises(StoreError, match="different"):
        feedline.open_dataset([str(tmp_path / "a.lmdb"), str(tmp_path / "b.lmdb")])


def test_a_folder_with_a_labels_file_reads_the_same_targets(labelled):
    src, labels, expected = labelled
    with feedline.open_dataset(src, labels_csv=labels) as ds:
        assert {ds.path(i): ds.targets(i) for i in range(len(ds))} == expected


@pytest.mark.parametrize("kind", ["lmdb", "hdf5"])
def test_a_version_2_store_opens_and_behaves_as_before(tmp_path, kind):
    """Written by hand as format.py documents version 2: no fields in the metadata."""
    records = make_records(n=6, classes=3)
    path = WRITERS[kind](tmp_path / f"v2.{kind}", records)
    with feedline.open_dataset(path) as ds:
        assert ds.meta["format_version"] == 2 and "fields" not in ds.meta
        assert ds.fields == {"label": {}}
        assert [ds.targets(i) for i in range(6)] == [{"label": lab} for lab in records.labels]
        assert [ds.label(i) for i in range(6)] == records.labels
        layout = ds.target_columns.batch_layout(4)
        assert layout == {"label": ((4,), "int64")}


def test_an_image_folder_still_packs_as_version_2(tmp_path):
    src = str(tmp_path / "src")
    make_photo_folder(src, n=4, classes=2, seed=1, sizes=[(64, 48)])
    pack(src, str(tmp_path / "o.lmdb"), progress=False)
    with feedline.open_dataset(str(tmp_path / "o.lmdb")) as ds:
        assert ds.meta["format_version"] == 2 and "fields" not in ds.meta and ds.fields == {"label": {}}


def test_a_labels_file_without_a_label_column_stores_minus_one_labels(tmp_path):
    src = str(tmp_path / "src")
    make_photo_folder(src, n=4, classes=2, seed=1, sizes=[(64, 48)])
    rels = sorted(os.path.relpath(os.path.join(d, f), src) for d, _, fs in os.walk(src) for f in fs)
    (tmp_path / "t.csv").write_text("path,target\n" + "".join(f"{r},{1_100_000 + k}\n" for k, r in enumerate(rels)))
    pack(src, str(tmp_path / "o.h5"), labels_csv=str(tmp_path / "t.csv"), progress=False)
    with feedline.open_dataset(str(tmp_path / "o.h5")) as ds:
        assert ds.fields == {"target": {"width": 1, "scalar": True}} and ds.classes == []
        assert ds.labels.tolist() == [-1] * 4
        assert [ds.targets(i) for i in range(4)] == [{"target": 1_100_000 + k} for k in range(4)]
    result = verify(str(tmp_path / "o.h5"), mode="checksums")
    assert result.ok, result.problems


# -- damaged fields ------------------------------------------------------------------------------

def rewrite_lmdb(path: str, key: bytes, value: bytes) -> None:
    env = lmdb.open(path, subdir=False, lock=False)
    with env.begin(write=True) as txn:
        txn.put(key, value)
    env.close()


def test_damaged_fields_are_refused_or_reported(labelled, tmp_path):
    src, labels, _ = labelled
    out = str(tmp_path / "o.lmdb")
    pack(src, out, labels_csv=labels, progress=False)
    with feedline.open_dataset(out) as ds:
        meta, classes = dict(ds.meta), ds.target_columns.arrays["box_classes"].copy()
    classes[1] = 7
    rewrite_lmdb(out, LMDB_COLUMN_PREFIX + b"box_classes", classes.astype("<i4").tobytes())
    result = verify(out, mode="checksums")
    assert [str(p) for p in result.problems] == [f"record 2 ({sorted(targets_by_path(out))[2]}): box 0 "
                                                 "[0.0, 0.0, 10.5, 22.0, 7]: class 7 outside 0..2"]
    rewrite_lmdb(out, LMDB_COLUMN_PREFIX + b"box_offsets", np.zeros(3, dtype="<i8").tobytes())
    with pytest.raises(StoreError, match="a target column is damaged .*box_offsets"):
        feedline.open_dataset(out)
    rewrite_lmdb(out, LMDB_META_KEY, json.dumps(meta | {"fields": {"colour": {}}}).encode())
    with pytest.raises(StoreError, match="fields are damaged"):
        feedline.open_dataset(out)


def test_an_hdf5_store_without_a_fields_column_is_refused(labelled, tmp_path):
    import h5py
    src, labels, _ = labelled
    out = str(tmp_path / "o.h5")
    pack(src, out, labels_csv=labels, progress=False)
    with h5py.File(out, "r+") as fh:
        del fh["label_set_classes"]
    with pytest.raises(StoreError, match="dataset 'label_set_classes' is missing"):
        feedline.open_dataset(out)


# -- batches -------------------------------------------------------------------------------------

def test_fill_writes_what_the_records_hold(labelled, tmp_path):
    src, labels, expected = labelled
    out = str(tmp_path / "o.lmdb")
    pack(src, out, labels_csv=labels, progress=False)
    with feedline.open_dataset(out) as ds:
        columns = ds.target_columns
        layout = columns.batch_layout(5)
        assert layout == {"label": ((5,), "int64"), "labels": ((5, 3), "float32"), "target": ((5, 2), "float32"),
                          "boxes": ((5, 3, 4), "float32"), "box_classes": ((5, 3), "int64"),
                          "box_counts": ((5,), "int64")}
        batch = {name: np.full(shape, 7, dtype=dtype) for name, (shape, dtype) in layout.items()}
        idx = [8, 3, 3, 0]            # a short batch, a record twice
        whole = np.array([[0, 0, *ds.size(i)] for i in idx])      # crops of the whole image, output its size
        columns.fill(idx, batch, crops=whole, flips=np.zeros(4, dtype=bool), size=(96, 96))
        for row, i in enumerate(idx):
            want = ds.targets(i)
            assert batch["label"][row] == want["label"]
            assert np.flatnonzero(batch["labels"][row]).tolist() == sorted(want["labels"])
            assert batch["target"][row].tolist() == want["target"]
            n = len(want["boxes"])
            assert batch["box_counts"][row] == n and batch["box_classes"][row, n:].tolist() == [-1] * (3 - n)
            h, w = ds.size(i)
            scaled = [[b[0] * 96 / w, b[1] * 96 / h, b[2] * 96 / w, b[3] * 96 / h] for b in want["boxes"]]
            np.testing.assert_allclose(batch["boxes"][row, :n], np.array(scaled).reshape(n, 4), rtol=1e-6)
        assert batch["label"][4] == 7     # rows past the batch are left alone


def test_take_and_concat_agree_with_record():
    cols = TargetColumns({"labels": {"max": 2}, "target": {"width": 1, "scalar": True}, "boxes": {"max": 1}},
                         {"label_set_offsets": [0, 2, 2, 3], "label_set_classes": [4, 1, 0], "targets": [1, 2, 3],
                          "box_offsets": [0, 0, 1, 1], "box_coords": [1, 2, 3, 4], "box_classes": [9]}, 3)
    rows = [cols.record(i) for i in range(3)]
    assert rows[0] == {"labels": [4, 1], "target": 1.0, "boxes": []}
    assert [cols.take([2, 0, 1, 0]).record(i) for i in range(4)] == [rows[2], rows[0], rows[1], rows[0]]
    joined = TargetColumns.concat([cols.take([1]), cols.take([0, 2])])
    assert [joined.record(i) for i in range(3)] == [rows[1], rows[0], rows[2]]
    assert joined.fields["labels"]["max"] == 2 and joined.fields["boxes"]["max"] == 1


@pytest.mark.parametrize("ext", ["lmdb", "h5"])
def test_an_interrupted_pack_resumes_with_every_records_targets(labelled, tmp_path, monkeypatch, ext):
    """Targets are taken from the labels file when the pack finishes, by path: a resumed pack,
    whose first records come from the journal, still gives each record its own."""
    import converters.packer as packer
    src, labels, expected = labelled
    out = str(tmp_path / f"o.{ext}")
    real, seen = packer.check_file, []

    def interrupted(root, rel, options):
        seen.append(rel)
        if len(seen) == 6:
            raise KeyboardInterrupt
        return real(root, rel, options)

    with monkeypatch.context() as m:
        m.setattr(packer, "check_file", interrupted)
        with pytest.raises(KeyboardInterrupt):
            pack(src, out, labels_csv=labels, commit_every=2, jobs=1, shuffle=5, progress=False)
    report = pack(src, out, labels_csv=labels, commit_every=2, jobs=1, shuffle=5, progress=False, resume=True)
    assert report.resumed_from == 4
    assert targets_by_path(out) == expected


def test_a_skipped_file_moves_no_other_records_targets(labelled, tmp_path):
    import shutil
    src, labels, expected = labelled
    copy = str(tmp_path / "src")
    shutil.copytree(src, copy)
    bad = sorted(expected)[1]
    with open(os.path.join(copy, bad), "wb") as fh:
        fh.write(b"not a jpeg at all")
    report = pack(copy, str(tmp_path / "o.h5"), labels_csv=labels, progress=False)
    assert [s.path for s in report.skipped] == [bad]
    assert targets_by_path(str(tmp_path / "o.h5")) == {p: t for p, t in expected.items() if p != bad}


def test_the_fill_bench_runs_and_reports_what_it_measured(tmp_path):
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "fill.json"
    done = subprocess.run([sys.executable, str(root / "bench" / "targets_fill.py"), "--images", "6", "--batch", "4",
                           "--repeats", "1", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())["results"]
    assert [r["work"] for r in rows] == ["decode + crop (1 thread)", "fill: label", "fill: label + labels + boxes"]
    assert rows[0]["share of decode"] == 1.0 and all(r["ms per batch"] > 0 for r in rows)


def test_a_grid_pack_keeps_the_targets(labelled, tmp_path):
    src, labels, expected = labelled
    out = str(tmp_path / "g.lmdb")
    pack(src, out, labels_csv=labels, layout="grid", progress=False)
    assert targets_by_path(out) == expected


# -- a class list per field ----------------------------------------------------------------------

def test_each_field_has_its_own_class_list_and_info_shows_each(tmp_path):
    src = str(tmp_path / "src")
    make_photo_folder(src, n=3, classes=1, seed=2, sizes=[(64, 48)])
    rels = sorted(os.path.relpath(os.path.join(d, f), src) for d, _, fs in os.walk(src) for f in fs)
    rows = [{"path": r, "label": ["indoor", "outdoor"][k % 2], "labels": [["red"], ["red", "blue"], []][k],
             "boxes": [[1, 1, 9, 9, ["car", "dog", "car"][k]]]} for k, r in enumerate(rels)]
    (tmp_path / "l.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = str(tmp_path / "o.lmdb")
    pack(src, out, labels_csv=str(tmp_path / "l.jsonl"), progress=False)
    with feedline.open_dataset(out) as ds:
        assert ds.meta["format_version"] == 4 and ds.classes == ["indoor", "outdoor"]
        assert ds.class_lists == ds.meta["class_lists"] == {"label": ["indoor", "outdoor"], "labels": ["blue", "red"],
                                                            "boxes": ["car", "dog"]}
        assert [ds.targets(i) for i in range(3)] == [
            {"label": 0, "labels": [1], "boxes": [[1, 1, 9, 9, 0]]},
            {"label": 1, "labels": [1, 0], "boxes": [[1, 1, 9, 9, 1]]},
            {"label": 0, "labels": [], "boxes": [[1, 1, 9, 9, 0]]}]
        assert ds.target_columns.batch_layout(2)["labels"] == ((2, 2), "float32")   # blue, red: not 6 wide
    info = describe(out)
    assert {name: [(c.name, c.count) for c in counts] for name, counts in info.class_lists.items()} == {
        "label": [("indoor", 2), ("outdoor", 1)], "labels": [("blue", 1), ("red", 2)], "boxes": [("car", 2), ("dog", 1)]}
    text = format_info(info)
    assert "labels: 2 classes" in text and "boxes: 2 classes" in text and "label: 2 classes" in text
    assert "2 (label), 2 (labels), 2 (boxes)" in text
    assert verify(out, mode="checksums").ok


def test_a_version_3_store_opens_with_one_shared_class_list_as_before(labelled, tmp_path):
    """Version 3 as format.py documents it: every field numbered in the one list ``classes``."""
    src, labels, expected = labelled
    out = str(tmp_path / "o.lmdb")
    pack(src, out, labels_csv=labels, progress=False)
    with feedline.open_dataset(out) as ds:
        meta = dict(ds.meta)
    del meta["class_lists"]
    rewrite_lmdb(out, LMDB_META_KEY, json.dumps(meta | {"format_version": 3, "classes": CLASSES}).encode())
    with feedline.open_dataset(out) as ds:
        assert ds.meta["format_version"] == 3 and ds.classes == CLASSES
        assert ds.class_lists == {"label": CLASSES, "labels": CLASSES, "boxes": CLASSES}
        assert {ds.path(i): ds.targets(i) for i in range(len(ds))} == expected
        assert ds.target_columns.batch_layout(1)["labels"] == ((1, 3), "float32")
    assert verify(out, mode="checksums").ok


def test_a_version_4_store_without_its_class_lists_is_refused(labelled, tmp_path):
    src, labels, _ = labelled
    out = str(tmp_path / "o.lmdb")
    pack(src, out, labels_csv=labels, progress=False)
    with feedline.open_dataset(out) as ds:
        meta = dict(ds.meta)
    rewrite_lmdb(out, LMDB_META_KEY, json.dumps(meta | {"class_lists": {"label": CLASSES}}).encode())
    with pytest.raises(StoreError, match="fields are damaged .*class lists .*label, labels, boxes"):
        feedline.open_dataset(out)
