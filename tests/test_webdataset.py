"""WebDataset tar shards as pack input: images with .cls or .json labels, keyed per tar."""
from __future__ import annotations

import io
import json
import os
import tarfile

import pytest

from converters import pack
from feedline.errors import FeedlineError
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
