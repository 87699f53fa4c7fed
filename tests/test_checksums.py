"""Checksums: computed at pack time, stored in both formats, checked by read_checked and
`feedline verify`; real bytes flipped in real packed files; version-1 files still open."""
from __future__ import annotations

import logging
import os

import numpy as np
import pytest
import xxhash
from storefiles import WRITERS, make_records

import feedline
from converters import pack
from feedline.core.errors import ChecksumError, StoreError
from feedline.dataset.format import FORMAT_VERSION
from feedline.sample import make_photo_folder
from feedline.dataset.verify import verify

KINDS = ("lmdb", "hdf5")
FLIP = 12 << 10


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> str:
    """40 photo-like JPEGs of 6-20 KiB: a 12 KiB flip lands in one or two records."""
    root = tmp_path_factory.mktemp("sums") / "src"
    make_photo_folder(str(root), n=40, classes=4, seed=11, sizes=[(240, 180), (180, 240), (320, 240)])
    return str(root)


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


def source_bytes(root: str, rel: str) -> bytes:
    with open(os.path.join(root, rel), "rb") as fh:
        return fh.read()


def flip_middle(path: str, nbytes: int = FLIP) -> None:
    """Invert ``nbytes`` in the middle of the file, as a bad sector or a bad copy would."""
    with open(path, "r+b") as fh:
        size = fh.seek(0, os.SEEK_END)
        fh.seek(size // 2 - nbytes // 2)
        data = bytes(b ^ 0xFF for b in fh.read(nbytes))
        fh.seek(size // 2 - nbytes // 2)
        fh.write(data)


def test_pack_stores_the_xxh3_of_every_record(photos, tmp_path, kind):
    out = str(tmp_path / ("p.lmdb" if kind == "lmdb" else "p.h5"))
    pack(photos, out)
    with feedline.open_dataset(out) as ds:
        assert ds.meta["format_version"] == 2   # the label alone: version 2, which older readers read
        assert ds.checksums.dtype == np.uint64 and len(ds.checksums) == len(ds) == 40
        for i in range(len(ds)):
            assert int(ds.checksums[i]) == xxhash.xxh3_64_intdigest(source_bytes(photos, ds.path(i)))
            assert bytes(ds.read_checked(i)) == source_bytes(photos, ds.path(i))


def damage(ds, photos: str) -> tuple[list[int], list[int]]:
    """The oracle: records whose bytes differ from their source file, and records LMDB
    refuses to read at all (a flipped overflow-page header: MDB_CORRUPTED)."""
    changed, unreadable = [], []
    for i in range(len(ds)):
        try:
            data = bytes(ds.read(i))
        except StoreError:
            unreadable.append(i)
            continue
        if data != source_bytes(photos, ds.path(i)):
            changed.append(i)
    return changed, unreadable


def test_flipped_bytes_are_found_by_read_checked_and_verify(photos, tmp_path, kind):
    out = str(tmp_path / ("d.lmdb" if kind == "lmdb" else "d.h5"))
    pack(photos, out)
    flip_middle(out)
    with feedline.open_dataset(out) as ds:
        changed, unreadable = damage(ds, photos)
        assert 1 <= len(changed) <= 3 and (kind == "lmdb" or not unreadable)
        for i in range(len(ds)):
            if i in changed:
                with pytest.raises(ChecksumError) as err:
                    ds.read_checked(i)
                text = str(err.value)
                assert "checksum mismatch" in text and out in text
                assert f"record {i} ({ds.path(i)})" in text and "pack" in text and "substitute" in text
                assert (err.value.index, err.value.path, err.value.filename) == (i, ds.path(i), out)
                assert isinstance(err.value, StoreError)
            elif i in unreadable:
                with pytest.raises(StoreError, match=f"record {i} .*damaged"):
                    ds.read_checked(i)
            else:
                assert bytes(ds.read_checked(i)) == source_bytes(photos, ds.path(i))
        paths = {i: ds.path(i) for i in sorted(changed + unreadable)}
    for mode in ("full", "checksums"):
        result = verify(out, jobs=2, mode=mode)
        # LMDB's walk over the keys meets a damaged page header too: one file problem.
        whole = [p.problem for p in result.problems if p.index is None]
        assert len(whole) == (1 if unreadable else 0) and all("damaged" in w for w in whole)
        assert [(p.index, p.path) for p in result.problems if p.index is not None] == list(paths.items())
        assert all(("checksum mismatch" in p.problem) == (p.index in changed)
                   for p in result.problems if p.index is not None)
        assert result.checksummed == 40 - len(paths)
        assert result.decoded == (40 - len(paths) if mode == "full" else 0)


def test_verify_cli_checksums_only_lists_the_damaged_records(photos, tmp_path, capsys):
    from feedline.cli import main
    out = str(tmp_path / "c.lmdb")
    pack(photos, out)
    assert main(["verify", out, "--checksums-only"]) == 0
    assert "records match their checksums" in capsys.readouterr().out
    flip_middle(out)
    assert main(["verify", out, "--checksums-only", "--jobs", "1"]) == 1
    printed = capsys.readouterr().out
    assert "checksum mismatch" in printed and "FAILED" in printed


def test_a_version_1_file_opens_without_checksums_and_says_so_once(tmp_path, kind, caplog):
    records = make_records(n=6, classes=2)
    path = WRITERS[kind](tmp_path / f"old.{kind}", records, records.v1_meta())
    caplog.set_level(logging.WARNING)
    with feedline.open_dataset(path) as a, feedline.open_dataset(path) as b:
        assert a.checksums is None and b.checksums is None
        assert [bytes(a.read_checked(i)) for i in range(6)] == records.images
    warnings = [r for r in caplog.records if "no checksums" in r.getMessage()]
    assert len(warnings) == 1 and path in warnings[0].getMessage()
    assert "format version 1" in warnings[0].getMessage()
    full = verify(path, jobs=1)
    assert full.ok and full.checksummed == 0 and full.decoded == 6 and "no checksums" in full.summary()
    only = verify(path, jobs=1, mode="checksums")
    assert not only.ok and "no checksums to check" in only.problems[0].problem


def test_a_version_2_file_without_its_checksums_column_is_damaged(tmp_path, kind):
    records = make_records(n=4, classes=2)
    meta_v2_cols_v1 = records.meta()
    path = WRITERS[kind](tmp_path / f"nocol.{kind}", records, meta_v2_cols_v1, checksums=False)
    with pytest.raises(StoreError, match="checksums"):
        feedline.open_dataset(path)


@pytest.mark.parametrize("version", [FORMAT_VERSION + 1, 0, "2"])
def test_an_unknown_format_version_names_both_versions(tmp_path, kind, version):
    records = make_records(n=4, classes=2)
    path = WRITERS[kind](tmp_path / f"v.{kind}", records, records.meta(format_version=version))
    with pytest.raises(StoreError) as err:
        feedline.open_dataset(path)
    text = str(err.value)
    assert f"format version {version!r}" in text and "reads versions 1, 2, 3" in text and path in text
    assert ("upgrade feedline" in text) == (version == FORMAT_VERSION + 1)


def test_a_checksum_error_survives_pickling():
    import pickle
    err = ChecksumError("x.lmdb: record 3 (a/b.jpg): checksum mismatch", "x.lmdb", 3, "a/b.jpg")
    back = pickle.loads(pickle.dumps(err))
    assert (str(back), back.filename, back.index, back.path) == (str(err), "x.lmdb", 3, "a/b.jpg")


def test_folder_store_has_no_checksums_and_reads(photos):
    with feedline.open_dataset(photos) as ds:
        assert ds.checksums is None
        assert bytes(ds.read_checked(0)) == source_bytes(photos, ds.path(0))
    with pytest.raises(feedline.FeedlineError, match="image folder has no checksums"):
        verify(photos, mode="checksums")
