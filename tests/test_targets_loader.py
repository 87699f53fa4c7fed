"""Targets delivered in the batch: every field through FeedLoader from LMDB, HDF5 and shards,
through DDP sharding, resume, substitution and every engine; each row checked against the
record it is (its ``label`` is its own id) and that record's crop (targets_helpers)."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from targets_helpers import check_row, expected_row, labelled_folder

import feedline
from converters import pack
from feedline import AugmentSpec, FeedLoader, OrderSpec, TransformSpec

KW = dict(batch_size=2, size=48, num_workers=2, device="cpu", decoder="pil")
UNSIZED = {k: v for k, v in KW.items() if k != "size"}   # beside an AugmentSpec, which carries the size


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return labelled_folder(str(tmp_path_factory.mktemp("labelled")))


@pytest.fixture(scope="module")
def packed(folder, tmp_path_factory):
    """{kind: dataset path} of the folder with every field: LMDB, HDF5 and 3 shards."""
    src, labels = folder
    root = tmp_path_factory.mktemp("packs")
    out = {"lmdb": str(root / "a.lmdb"), "h5": str(root / "a.h5")}
    for path in out.values():
        pack(src, path, labels_csv=labels, progress=False)
    pack(src, str(root / "s.lmdb"), labels_csv=labels, num_shards=3, progress=False)
    out["shards"] = str(root / "s.shards.json")
    return out


def record_of(store) -> dict[int, int]:
    """The record each ``label`` names (labels are ids here)."""
    return {store.targets(i)["label"]: i for i in range(len(store))}


def check_epoch(loader, epoch: int) -> list[int]:
    """Every row of ``epoch`` equals its record's oracle; the records in delivered order."""
    store, c = loader.store, loader.config
    ids, seen = record_of(store), []
    loader.set_epoch(epoch)
    kept = list(loader)   # kept without copies: a slot still held must not be written again
    for images, got in kept:
        assert set(got) == {"label", "labels", "target", "boxes", "box_classes", "box_counts", "keypoints"}
        assert got["keypoints"].dtype == torch.float32 and got["keypoints"].shape == (len(images), 2, 3)
        assert got["labels"].dtype == torch.float32 and got["target"].dtype == torch.float32
        assert got["boxes"].dtype == torch.float32 and got["box_classes"].dtype == torch.int64
        m = store.fields["boxes"]["max"]
        assert got["boxes"].shape == (len(images), m, 4) and got["target"].shape == (len(images), 3)
        for row in range(len(images)):
            record = ids[int(got["label"][row])]
            check_row(got, row, expected_row(store, record, c.spec_at(epoch), c.seed, epoch, c.augment.min_box_visibility),
                      m)
            seen.append(record)
    return seen


@pytest.mark.parametrize("kind", ["lmdb", "h5", "shards"])
def test_every_field_reaches_the_batch_with_its_own_records_crop(packed, kind):
    with FeedLoader(packed[kind], shuffle=True, train=True, seed=3, **KW) as loader:
        for epoch in (0, 1):
            assert sorted(check_epoch(loader, epoch)) == list(range(12))


def test_boxes_follow_a_size_schedule_in_each_epochs_pixels(packed):
    """The ring is reallocated per size; the boxes are in that epoch's output pixels."""
    from feedline.planning.size_schedule import ProgressiveSize
    kw = {**KW, "size": ProgressiveSize(32, 64, ramp_epochs=2, step=16)}
    with FeedLoader(packed["lmdb"], shuffle=True, train=True, seed=4, **kw) as loader:
        for epoch in (0, 1, 2):
            assert sorted(check_epoch(loader, epoch)) == list(range(12))


def test_evaluation_boxes_follow_resize_and_center_crop(packed):
    augment = AugmentSpec(size=48, train=False, min_box_visibility=0.6)
    with FeedLoader(packed["lmdb"], shuffle=False, augment=augment, **UNSIZED) as loader:
        assert check_epoch(loader, 0) == list(range(12))


def test_each_ddp_rank_gets_its_records_targets(packed):
    seen = []
    for rank in (0, 1):
        with FeedLoader(packed["lmdb"], shuffle=True, seed=5, order=OrderSpec(rank=rank, world_size=2), **KW) as loader:
            seen.append(check_epoch(loader, 2))
    assert len(seen[0]) == len(seen[1]) == 6 and sorted(seen[0] + seen[1]) == list(range(12))


def test_a_resumed_loader_delivers_the_same_targets(packed):
    with FeedLoader(packed["h5"], shuffle=True, seed=9, **KW) as loader:
        loader.set_epoch(1)
        it = iter(loader)
        next(it)
        state = loader.state_dict()
        rest = [{k: v.clone() for k, v in got.items()} for _, got in it]
    with FeedLoader(packed["h5"], shuffle=True, seed=9, **KW) as resumed:
        resumed.load_state_dict(state)
        again = [got for _, got in resumed]
    assert len(again) == len(rest) == 5
    for a, b in zip(again, rest, strict=True):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ids = record_of(resumed.store)
    for got in again:
        for row in range(len(got["label"])):
            want = expected_row(resumed.store, ids[int(got["label"][row])], resumed.config.augment, 9, 1)
            check_row(got, row, want, resumed.store.fields["boxes"]["max"])


@pytest.mark.parametrize("fields, name, dtype, shape", [
    (("labels",), "labels", torch.float32, (2, 4)),
    (("target",), "target", torch.float32, (2,)),
    (("keypoints",), "keypoints", torch.float32, (2, 2, 3)),
])
def test_one_field_comes_as_one_tensor(tmp_path, fields, name, dtype, shape):
    src, labels = labelled_folder(str(tmp_path), fields=fields)
    out = str(tmp_path / "one.lmdb")
    pack(src, out, labels_csv=labels, progress=False)
    with FeedLoader(out, shuffle=False, train=False, **KW) as loader:
        batches = [y for _, y in loader]
        store = loader.store
    assert isinstance(batches[0], torch.Tensor) and batches[0].dtype == dtype and batches[0].shape == shape
    rows = torch.cat(batches).numpy()
    for i in range(len(store)):   # sequential: row i is record i
        want = store.targets(i)[name]
        if name == "labels":
            assert np.flatnonzero(rows[i]).tolist() == sorted(want)
        elif name == "keypoints":
            np.testing.assert_allclose(rows[i], expected_row(store, i, loader.config.augment, 0, 0)["keypoints"])
        else:
            assert rows[i] == np.float32(want)
    assert (store.labels == -1).all()   # no `label` column: the classic column keeps -1


def test_a_substitute_brings_its_own_targets_and_boxes(folder, tmp_path):
    src, labels = folder
    import shutil
    damaged = str(tmp_path / "src")
    shutil.copytree(src, damaged)
    store = feedline.open_dataset(damaged, labels_csv=labels)
    bad = 4
    with open(os.path.join(damaged, store.path(bad)), "wb") as fh:
        fh.write(b"\xff\xd8\xff\xe0 not a jpeg any more" * 10)
    with FeedLoader(store, shuffle=True, seed=1, on_error="substitute", **KW) as loader:
        seen = check_epoch(loader, 0)   # every row is the record its label names: a substitute's own
        [row] = loader.stats.bad_records
    assert row.index == bad and row.substitute is not None and row.substitute != bad
    assert bad not in seen and seen.count(row.substitute) == 2


@pytest.mark.dali
def test_dali_delivers_the_thread_engines_targets(packed):
    pytest.importorskip("nvidia.dali")
    kw = {**KW, "decoder": "auto"}
    with FeedLoader(packed["lmdb"], shuffle=True, seed=2, engine="dali", **kw) as dali:
        assert sorted(check_epoch(dali, 0)) == list(range(12))


@pytest.mark.cuda
@pytest.mark.parametrize("engine", ["threads", "gpu"])
def test_cuda_engines_deliver_the_cpu_targets(packed, engine):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    kw = {**KW, "device": "cuda", "decoder": "pil" if engine == "threads" else "auto"}
    with FeedLoader(packed["lmdb"], shuffle=True, seed=2, **KW) as cpu, \
            FeedLoader(packed["lmdb"], shuffle=True, seed=2, engine=engine, **kw) as gpu:
        for (_, a), (_, b) in zip(cpu, gpu, strict=True):
            assert a.keys() == b.keys()
            assert all(b[k].is_cuda and torch.equal(a[k], b[k].cpu()) for k in a)


def test_the_readme_targets_block_runs_as_written(packed, tmp_path, monkeypatch):
    import re
    from pathlib import Path
    import shutil
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    [code] = re.findall(r"<!-- readme-test: run where scene.lmdb exists \(every field\) -->\n```python\n(.*?)```",
                        readme, re.S)
    # without a label field, so that ``dataset.classes`` is the labels field's own list
    src, labels = labelled_folder(str(tmp_path / "scene"), fields=("labels", "target", "boxes", "keypoints"),
                                   listed_target=True)
    pack(src, str(tmp_path / "scene.lmdb"), labels_csv=labels, progress=False)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["targets"]["boxes"].shape[1:] == (4, 4) and namespace["loss"].requires_grad


def test_the_epoch_bench_runs_and_reports_the_ratio(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path
    out = tmp_path / "targets.json"
    done = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "bench" / "targets.py"),
                           "--quick", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())["results"]
    assert [r["targets"] for r in rows] == ["label", "label + labels + boxes", "label + mask (int64)",
                                            "label + mask (uint8)"]
    assert rows[0]["vs label"] == 1.0 and all(r["epoch s"] > 0 for r in rows)


@pytest.mark.parametrize("bad", [-0.1, 1.5, "half", True])
def test_min_box_visibility_outside_0_to_1_is_refused(packed, bad):
    with pytest.raises(ValueError, match=r"min_box_visibility must be a number in \[0, 1\]"):
        FeedLoader(packed["lmdb"], augment=AugmentSpec(size=48, min_box_visibility=bad), **UNSIZED)


@pytest.mark.parametrize("engine", ["threads", pytest.param("dali", marks=pytest.mark.dali)])
def test_a_loader_on_boxes_refuses_a_geometric_transform_by_name(packed, engine):
    """Given by name or as an object, to any engine: refused before an epoch starts."""
    from feedline.transforms import TransformError
    with pytest.raises(TransformError, match=r"transforms\[0\]: RandAugment shears"):
        FeedLoader(packed["lmdb"], **{**KW, "decoder": "auto" if engine == "dali" else "pil"}, engine=engine,
                   transforms=["RandAugment"])
    with pytest.raises(TransformError, match=r"batch_transforms\[0\]: MixUp blends"):
        FeedLoader(packed["lmdb"], **KW, transforms=TransformSpec(["ColorJitter"], ["MixUp"]))


@pytest.mark.cuda
@pytest.mark.parametrize("engine", ["threads", "gpu"])
def test_a_mixer_mixes_multi_label_targets_on_cuda_as_on_the_cpu(tmp_path, engine):
    """A multi-label store (its int label column is -1) with Mixup: the CUDA engines mix the
    multi-hot targets as the CPU does, not refusing the -1 column as out of range."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from feedline.transforms import Mixup
    src, labels = labelled_folder(str(tmp_path), fields=("labels",))
    out = str(tmp_path / "multi.lmdb")
    pack(src, out, labels_csv=labels, progress=False)
    mix = dict(transforms=TransformSpec([], [Mixup(1.0, 1.0)]), shuffle=True, seed=2)
    kw = {**KW, "device": "cuda", "decoder": "pil" if engine == "threads" else "auto"}
    with FeedLoader(out, **mix, **KW) as cpu, FeedLoader(out, engine=engine, **mix, **kw) as gpu:
        for (_, a), (_, b) in zip(cpu, gpu, strict=True):
            assert b.is_cuda and torch.allclose(a, b.cpu(), atol=1e-6)


@pytest.mark.cuda
@pytest.mark.parametrize("engine", ["threads", "gpu"])
def test_cuda_engines_follow_a_size_schedule_with_the_cpu_targets(packed, engine):
    """A size schedule on CUDA: the thread engine's pinned ring (with its target buffers) is
    reallocated per size, the GPU engine crops to it; the boxes are in each epoch's pixels."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from feedline.planning.size_schedule import ProgressiveSize
    ramp = {**KW, "shuffle": True, "seed": 2, "size": ProgressiveSize(32, 64, ramp_epochs=2, step=16)}
    kw = {**ramp, "device": "cuda", "decoder": "pil" if engine == "threads" else "auto"}
    with FeedLoader(packed["lmdb"], **ramp) as cpu, FeedLoader(packed["lmdb"], engine=engine, **kw) as gpu:
        for e, side in ((0, 32), (1, 48), (2, 64)):
            cpu.set_epoch(e)
            gpu.set_epoch(e)
            for (_, a), (x, b) in zip(cpu, gpu, strict=True):
                assert x.is_cuda and x.shape[-2:] == (side, side)
                assert all(b[k].is_cuda and torch.equal(a[k], b[k].cpu()) for k in a)
