"""WebDataset tar shards as pack input: images with .cls or .json labels, keyed per tar."""
from __future__ import annotations

import io
import json
import os
import tarfile

import pytest
from pack_helpers import interrupt_after

from converters import pack
from feedline.core.errors import FeedlineError, PackError
from feedline.stores import open_dataset


def add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_tars(photo_folder, folder) -> tuple[list[str], dict[bytes, int]]:
    """The photos in two tars, .cls labels in the first and .json in the second; {bytes: label}."""
    photos = sorted(p for p in photo_folder.rglob("*.jpg"))
    classes = sorted({p.parent.name for p in photos})
    expected, paths = {}, []
    for t, part in enumerate((photos[:20], photos[20:])):
        path = os.path.join(folder, f"train-{t:04d}.tar")
        with tarfile.open(path, "w") as tar:
            for k, photo in enumerate(part):
                data, label = photo.read_bytes(), classes.index(photo.parent.name)
                add(tar, f"sample{k:05d}.jpg", data)
                if t == 0:
                    add(tar, f"sample{k:05d}.cls", str(label).encode())
                else:
                    add(tar, f"sample{k:05d}.json", json.dumps({"label": label, "note": "x"}).encode())
                expected[data] = label
            add(tar, "unlabelled.jpg", part[0].read_bytes())
        paths.append(path)
    return paths, expected


def test_tar_shards_pack_with_their_labels(photo_folder, tmp_path):
    tars, expected = write_tars(photo_folder, tmp_path)
    out = tmp_path / "train.lmdb"
    report = pack(str(tmp_path / "train-*.tar"), str(out), progress=False)
    assert report.packed == len(expected) == 48
    with open_dataset(str(out)) as store:
        got = {bytes(store.read(i)): int(store.labels[i]) for i in range(len(store))}
        assert store.path(0).startswith("train-0000/")
    assert got == expected
    assert not os.path.exists(str(out) + ".tars")   # the staging folder is gone
    again = tmp_path / "list.lmdb"
    pack(tars, str(again), progress=False)
    with open_dataset(str(again)) as store:
        assert len(store) == 48


def test_bad_tar_input_is_one_line(tmp_path):
    with pytest.raises(FeedlineError, match="matches no .tar file"):
        pack(str(tmp_path / "none-*.tar"), str(tmp_path / "x.lmdb"))
    (tmp_path / "bad.tar").write_bytes(b"not a tar at all" * 100)
    with pytest.raises(FeedlineError, match="not a readable tar file"):
        pack(str(tmp_path / "bad.tar"), str(tmp_path / "x.lmdb"))
    with tarfile.open(tmp_path / "nolabels.tar", "w") as tar:
        add(tar, "a.jpg", b"\xff\xd8")
    with pytest.raises(FeedlineError, match="no labelled images"):
        pack(str(tmp_path / "nolabels.tar"), str(tmp_path / "x.lmdb"))


# -- beyond the plain case: ImageNet's names, .json targets, keys in folders, honest counts ------

def photos(photo_folder, n: int) -> list[bytes]:
    return [p.read_bytes() for p in sorted(photo_folder.rglob("*.jpg"))[:n]]


def tar_of(path, members: list[tuple[str, bytes]]) -> str:
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            add(tar, name, data)
    return str(path)


def packed(src, out) -> list[tuple[str, bytes, dict]]:
    pack(src, str(out), progress=False)
    with open_dataset(str(out)) as store:
        return [(store.path(i), bytes(store.read(i)), store.targets(i)) for i in range(len(store))]


def test_imagenet_upper_case_suffixes_pack_under_their_own_names(photo_folder, tmp_path):
    a, b, c = photos(photo_folder, 3)
    tar = tar_of(tmp_path / "imagenet-0000.tar", [
        ("n01440764_10026.JPEG", a), ("n01440764_10026.cls", b"0"),
        ("n01443537_2.JPEG", b), ("n01443537_2.CLS", b"1"),
        ("val/n015_7.Jpg", c), ("val/n015_7.Cls", b" 1\n")])
    assert packed(tar, tmp_path / "o.lmdb") == [
        ("imagenet-0000/n01440764_10026.JPEG", a, {"label": 0}),
        ("imagenet-0000/n01443537_2.JPEG", b, {"label": 1}),
        ("imagenet-0000/val/n015_7.Jpg", c, {"label": 1})]


def test_json_targets_of_every_kind_are_packed_with_their_values(photo_folder, tmp_path):
    a, b = photos(photo_folder, 2)
    rows = {"a": {"label": "cat", "labels": ["sky", "grass"], "target": [0.5, -2.0],
                  "boxes": [[1, 2, 10, 12, "dog"]], "keypoints": [[3, 4, 2]], "note": "ignored"},
            "b": {"label": "ant", "labels": ["sky"], "target": [1.5, 0.0],
                  "boxes": [[0, 0, 5, 5, "cow"], [2, 2, 4, 4, "dog"]], "keypoints": [[6, 7, 1]]}}
    tar = tar_of(tmp_path / "t.tar", [("a.jpg", a), ("a.json", json.dumps(rows["a"]).encode()),
                                      ("b.jpg", b), ("b.json", json.dumps(rows["b"]).encode())])
    got = packed(tar, tmp_path / "o.h5")
    with open_dataset(str(tmp_path / "o.h5")) as store:
        assert store.class_lists == {"label": ["ant", "cat"], "labels": ["grass", "sky"], "boxes": ["cow", "dog"]}
    assert got == [("t/a.jpg", a, {"label": 1, "labels": [1, 0], "target": [0.5, -2.0],
                                   "boxes": [[1.0, 2.0, 10.0, 12.0, 1]], "keypoints": [[3.0, 4.0, 2.0]]}),
                   ("t/b.jpg", b, {"label": 0, "labels": [1], "target": [1.5, 0.0],
                                   "boxes": [[0.0, 0.0, 5.0, 5.0, 0], [2.0, 2.0, 4.0, 4.0, 1]],
                                   "keypoints": [[6.0, 7.0, 1.0]]})]


def test_cls_gives_the_label_and_json_the_other_fields(photo_folder, tmp_path):
    """A sample with KEY.cls and a KEY.json of boxes keeps both; a KEY.json's "cls" is its label
    when it has no "label", beside its other fields too."""
    a, b, c = photos(photo_folder, 3)
    box = json.dumps({"boxes": [[1, 1, 9, 9, "x"]]}).encode()
    tar = tar_of(tmp_path / "t.tar", [
        ("a.jpg", a), ("a.cls", b"3"), ("a.json", box),
        ("b.jpg", b), ("b.json", json.dumps({"cls": 1, "boxes": [[2, 2, 8, 8, "y"]]}).encode()),
        ("c.jpg", c), ("c.cls", b"2"), ("c.json", json.dumps({"label": 2, "boxes": [], "extra": 1}).encode())])
    assert [(path, targets) for path, _, targets in packed(tar, tmp_path / "o.lmdb")] == [
        ("t/a.jpg", {"label": 3, "boxes": [[1.0, 1.0, 9.0, 9.0, 0]]}),
        ("t/b.jpg", {"label": 1, "boxes": [[2.0, 2.0, 8.0, 8.0, 1]]}),
        ("t/c.jpg", {"label": 2, "boxes": []})]


def test_a_bad_label_names_the_tar_and_the_sample_not_the_staging_file(photo_folder, tmp_path):
    a, b = photos(photo_folder, 2)
    tar = tar_of(tmp_path / "t.tar", [("a.jpg", a), ("a.json", b'{"label": 0}'),
                                      ("b.jpg", b), ("b.json", b'{"label": true}')])
    with pytest.raises(FeedlineError) as err:
        pack(tar, str(tmp_path / "o.lmdb"), progress=False)
    assert str(err.value) == f"{tar}: sample b: label True is not a class: write a name or an integer"
    mixed = tar_of(tmp_path / "m.tar", [("a.jpg", a), ("a.cls", b"1"),
                                        ("b.jpg", b), ("b.json", b'{"label": 2, "target": 0.5}')])
    with pytest.raises(FeedlineError) as err:
        pack(mixed, str(tmp_path / "m.lmdb"), progress=False)
    assert str(err.value) == (f"{mixed}: sample b has label, target, but sample a (m.tar) has label: every sample "
                              "needs the same fields (KEY.cls gives a label; KEY.json the fields it names)")
    assert not os.path.exists(tmp_path / "o.lmdb") and not os.path.exists(tmp_path / "m.lmdb")


def test_keys_in_folders_stay_apart_and_a_key_outside_the_tar_is_refused(photo_folder, tmp_path):
    a, b, c = photos(photo_folder, 3)
    tar = tar_of(tmp_path / "t.tar", [("x/a.jpg", a), ("x/a.cls", b"0"), ("x_a.jpg", b), ("x_a.cls", b"1"),
                                      ("./c.jpg", c), ("./c.cls", b"1")])
    assert packed(tar, tmp_path / "o.lmdb") == [("t/c.jpg", c, {"label": 1}), ("t/x/a.jpg", a, {"label": 0}),
                                                ("t/x_a.jpg", b, {"label": 1})]
    evil = tar_of(tmp_path / "e.tar", [("../../e.jpg", a), ("../../e.cls", b"0")])
    with pytest.raises(FeedlineError) as err:
        pack(evil, str(tmp_path / "e.lmdb"), progress=False)
    assert str(err.value) == (f"{evil}: member ../../e.jpg lies outside the tar's folder (a '..' in its "
                              "name); write the shard with names relative to its root")
    assert not os.path.exists(tmp_path / "e.jpg")


def test_images_without_a_label_are_counted_and_named(photo_folder, tmp_path, caplog):
    a, b, c, d = photos(photo_folder, 4)
    tar = tar_of(tmp_path / "t.tar", [("a.jpg", a), ("a.json", b'{"class_name": "tench"}'),
                                      ("b.jpg", b), ("b.json", b"[1, 2]"), ("c.jpg", c),
                                      ("d.jpg", d), ("d.cls", b"0")])
    assert packed(tar, tmp_path / "o.lmdb") == [("t/d.jpg", d, {"label": 0})]
    assert (f"3 image(s) in the tar files have no label (KEY.cls, or a KEY.json naming label, cls, labels, "
            f"target, boxes or keypoints): not packed; the first: {tar}: sample a") in caplog.text


def test_a_fresh_pack_does_not_take_images_staged_for_an_earlier_one(photo_folder, tmp_path, monkeypatch):
    """An interrupted pack of two tars leaves its staging folder (for --resume); a new pack of
    one tar into the same OUT packs that tar alone, with nothing listed as not in the labels."""
    tars, expected = write_tars(photo_folder, tmp_path)
    out = str(tmp_path / "o.lmdb")
    with monkeypatch.context() as m:
        interrupt_after(m, 30)
        with pytest.raises(KeyboardInterrupt):
            pack(tars, out, progress=False, commit_every=8, jobs=1)
    report = pack(tars[:1], out, progress=False)
    assert report.packed == 20 and report.skipped == []
    assert not os.path.exists(out + ".tars")


def test_an_interrupted_pack_of_tars_resumes_to_the_uninterrupted_one(photo_folder, tmp_path, monkeypatch):
    tars, _ = write_tars(photo_folder, tmp_path)
    whole = packed(tars, tmp_path / "whole.h5")
    out = str(tmp_path / "o.h5")
    with monkeypatch.context() as m:
        interrupt_after(m, 30)
        with pytest.raises(KeyboardInterrupt):
            pack(tars, out, progress=False, commit_every=8, jobs=1)
    report = pack(tars, out, progress=False, commit_every=8, jobs=1, resume=True)
    assert report.resumed_from == 24 and report.packed == 48
    with open_dataset(out) as store:
        assert [(store.path(i), bytes(store.read(i)), store.targets(i)) for i in range(len(store))] == whole


def test_a_box_outside_its_image_names_the_tar_and_the_sample(photo_folder, tmp_path):
    import cv2
    import numpy as np
    a, b = photos(photo_folder, 2)
    height, width = cv2.imdecode(np.frombuffer(b, np.uint8), cv2.IMREAD_COLOR).shape[:2]
    inside = json.dumps({"label": 0, "boxes": [[0, 0, 4, 4, "x"]]}).encode()
    outside = json.dumps({"label": 1, "boxes": [[width, 0, width + 4, 4, "x"]]}).encode()   # starts at its right edge
    tar = tar_of(tmp_path / "t.tar", [("a.jpg", a), ("a.json", inside), ("b.jpg", b), ("b.json", outside)])
    with pytest.raises(PackError) as err:
        pack(tar, str(tmp_path / "o.lmdb"), progress=False)
    assert str(err.value).startswith(f"{tar}: sample b (t/b.jpg): box 0 ")
    assert "labels.jsonl" not in str(err.value) and not os.path.exists(tmp_path / "o.lmdb")
