"""A full disk, for real: packs into a small tmpfs. Refused up front when the estimate
does not fit; when the disk fills anyway, a clear error, nothing already written damaged,
and --resume finishes once there is room. Needs root (mount); skipped otherwise."""
from __future__ import annotations

import os
import re

import pytest
from pack_helpers import committed, snapshot

import feedline
from converters import pack
from feedline.core.errors import DiskFullError
from feedline.sample import make_photo_folder

FORMATS = ["lmdb", "h5"]


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> str:
    """About 0.7 MiB of photo-like JPEGs: more than the 512 KiB disk below holds."""
    root = tmp_path_factory.mktemp("full") / "src"
    make_photo_folder(str(root), n=24, classes=2, seed=4, sizes=[(320, 240), (240, 320)])
    return str(root)


SMALL_DISK = ("512k", "64m")  # the tmpfs of the small_disk fixture (conftest), and its grown size


def source_bytes(src: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(src) for f in fs)


def in_bytes(text: str) -> float:
    number, unit = text.split()
    return float(number) * {"B": 1, "KiB": 2**10, "MiB": 2**20}[unit]


def test_the_sample_does_not_fit(src):
    assert source_bytes(src) > 1.2 * 2**19


@pytest.mark.parametrize("ext", FORMATS)
@pytest.mark.parametrize("sample", [None, 5])
def test_refused_before_writing_when_the_estimate_does_not_fit(src, small_disk, ext, sample, monkeypatch):
    if sample is not None:  # a large pack looks up a sample of sizes first
        monkeypatch.setattr("converters.disk_space._SAMPLE", sample)
    out = small_disk.path / f"o.{ext}"
    with pytest.raises(DiskFullError) as err:
        pack(src, str(out))
    text = str(err.value)
    found = re.search(r"needs ([\d.]+ \w+), ([\d.]+ \w+) free on (\S+) \(tmpfs\)", text)
    assert found, text
    needed, free = in_bytes(found[1]), in_bytes(found[2])
    assert source_bytes(src) < needed < 2 * source_bytes(src)
    assert 490 << 10 < free <= 512 << 10 and found[3] == str(small_disk.path)
    assert os.listdir(small_disk.path) == []


@pytest.mark.parametrize("ext", FORMATS)
def test_disk_full_while_writing_keeps_what_is_committed_and_resume_finishes(src, small_disk, tmp_path, ext):
    reference = str(tmp_path / f"reference.{ext}")
    pack(src, reference)
    out = str(small_disk.path / f"o.{ext}")
    with pytest.raises(DiskFullError) as err:
        pack(src, out, commit_every=4, space_check=False)
    text = str(err.value)
    assert "the disk is full" in text and "--resume" in text and "partial output is kept" in text
    assert str(small_disk.path) in text
    assert not os.path.exists(out)
    done = committed(out)
    assert 4 <= done < 24 and done % 4 == 0
    small_disk.grow()
    report = pack(src, out, commit_every=4, resume=True)
    assert report.resumed_from == done
    assert snapshot(out) == snapshot(reference)
    assert sorted(os.listdir(small_disk.path)) == [f"o.{ext}"]


@pytest.mark.parametrize("ext", FORMATS)
def test_an_existing_output_survives_a_full_disk(src, small_disk, tmp_path, ext):
    few = tmp_path / "few" / "class_000"
    make_photo_folder(str(few.parent), n=2, classes=1, seed=9, sizes=[(64, 48)])
    out = str(small_disk.path / f"o.{ext}")
    pack(str(few.parent), out)
    before = snapshot(out)
    with pytest.raises(DiskFullError):
        pack(src, out, overwrite=True, commit_every=4, space_check=False)
    assert snapshot(out) == before
    with feedline.open_dataset(out) as ds:
        assert len(ds) == 2
