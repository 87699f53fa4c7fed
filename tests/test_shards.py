"""Sharded packs: shards plus an index, opened as one data set (index, glob or list), split
across "machines" and joined without repacking, resumed; and every bad set refused at open."""
from __future__ import annotations

import json
import os
import random
import shutil

import pytest
from pack_helpers import snapshot
from storefiles import make_records, write_hdf5, write_lmdb

import feedline
from converters import PackOptions, join_shards, pack
from converters.options import parse_shard_size
from feedline.core.errors import ChecksumError, FeedlineError, PackError, StoreError
from feedline.dataset.format import shard_index, shard_name
from feedline.sample import make_photo_folder
from feedline.dataset.verify import verify

FORMATS = ["lmdb", "h5"]
N = 23  # files: not a multiple of the shard counts below


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("shards") / "src"
    make_photo_folder(str(root), n=N, classes=3, seed=6, sizes=[(96, 64), (64, 96), (80, 60)])
    return str(root)


@pytest.fixture(scope="module")
def single(src, tmp_path_factory) -> dict:
    """The unsharded packs: what every sharded set must read as, record for record."""
    folder = tmp_path_factory.mktemp("single")
    return {ext: records(str(folder / f"all.{ext}"), pack_first=src) for ext in FORMATS}


def records(path, pack_first: str | None = None) -> list[tuple]:
    if pack_first is not None:
        pack(pack_first, path)
    with feedline.open_dataset(path) as ds:
        return [(bytes(ds.read_checked(i)), ds.label(i), ds.size(i), ds.path(i), int(ds.checksums[i]))
                for i in range(len(ds))]


def source_files(src: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), src).replace(os.sep, "/")
                  for d, _, fs in os.walk(src) for f in fs)


@pytest.mark.parametrize("ext", FORMATS)
def test_num_shards_write_named_shards_and_an_index_read_as_one_data_set(src, single, tmp_path, ext):
    out = str(tmp_path / f"o.{ext}")
    report = pack(src, out, num_shards=3)
    names = [shard_name(out, k, 3) for k in range(3)]
    assert names[1].endswith(f"o-00001-of-00003.{ext}")
    assert sorted(os.listdir(tmp_path)) == sorted([os.path.basename(n) for n in names] + ["o.shards.json"])
    assert report.packed == N and report.out == shard_index(out) and [r.packed for r in report.shards] == [7, 8, 8]
    index = json.loads(open(shard_index(out)).read())
    assert index["format"] == "feedline-shards" and index["version"] == 1 and index["format_version"] == 2
    assert index["count"] == N and index["checksums"] is True and index["classes"] == ["class_000", "class_001",
                                                                                         "class_002"]
    assert [(s["file"], s["count"]) for s in index["shards"]] == [(os.path.basename(n), c) for n, c in
                                                                  zip(names, [7, 8, 8], strict=True)]
    # Each shard: the next part of the sorted file list, with the global class list.
    paths = source_files(src)
    start = 0
    for name, count in zip(names, [7, 8, 8], strict=True):
        with feedline.open_dataset(name) as ds:
            assert [ds.path(i) for i in range(len(ds))] == paths[start:start + count]
            assert ds.classes == index["classes"]
            assert ds.meta["shard"]["index"] == names.index(name) and ds.meta["shard"]["of"] == 3
        start += count
    for opened in (shard_index(out), str(tmp_path / f"o-*-of-*.{ext}"), random.Random(1).sample(names, 3)):
        assert records(opened) == single[ext]
    with feedline.open_dataset(shard_index(out)) as ds:
        assert len(ds) == N and ds.kind == ("lmdb" if ext == "lmdb" else "hdf5")
        assert ds.labels.tolist() == [r[1] for r in single[ext]]
        assert ds.sizes.tolist() == [list(r[2]) for r in single[ext]]
        assert ds.byte_lengths().tolist() == [len(r[0]) for r in single[ext]]
        assert ds.files() == names and ds.layout_problems() == []


@pytest.mark.parametrize("size, counts", [("10", [10, 10, 3]), ("25KB", None), ("40KiB", None)])
def test_shard_size_in_files_or_bytes(src, single, tmp_path, size, counts):
    out = str(tmp_path / "s.lmdb")
    option = parse_shard_size(size)
    report = pack(src, out, **option)
    got = [r.packed for r in report.shards]
    if counts is not None:
        assert got == counts
    else:
        budget = option["shard_bytes"]
        for shard in report.shards:
            with feedline.open_dataset(shard.out) as ds:
                sizes = [os.path.getsize(os.path.join(src, ds.path(i))) for i in range(len(ds))]
            assert sum(sizes) <= budget or len(sizes) == 1
        assert len(got) >= 2 and sum(got) == N
    assert records(shard_index(out)) == single["lmdb"]


@pytest.mark.parametrize("text, expected", [("100000", {"shard_records": 100000}), ("10GB", {"shard_bytes": 10**10}),
                                            ("1.5 MiB", {"shard_bytes": 1572864}), ("7b", {"shard_bytes": 7})])
def test_parse_shard_size(text, expected):
    assert parse_shard_size(text) == expected


@pytest.mark.parametrize("text", ["0", "-5", "10 parsecs", "GB", "1.5", ""])
def test_parse_shard_size_refuses_nonsense(text):
    with pytest.raises(PackError, match="--shard-size"):
        parse_shard_size(text)


@pytest.mark.parametrize("kw, match", [({"num_shards": 2, "shard_records": 5}, "not both"),
                                       ({"shard_index": 0}, "needs --num-shards"),
                                       ({"num_shards": 0}, "num_shards must be >= 1")])
def test_shard_options_are_validated(kw, match):
    with pytest.raises(PackError, match=match):
        PackOptions(**kw)


def test_shard_index_out_of_range_and_more_shards_than_files(src, tmp_path):
    with pytest.raises(PackError, match="has 3 shards"):
        pack(src, str(tmp_path / "o.lmdb"), num_shards=3, shard_index=3)
    with pytest.raises(PackError, match="give at most 23"):
        pack(src, str(tmp_path / "o.lmdb"), num_shards=24)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("ext", FORMATS)
def test_split_across_machines_then_joined_without_repacking(src, single, tmp_path, ext, capsys):
    out = str(tmp_path / f"m.{ext}")
    for k in (2, 0):  # two machines finish first; no index until every shard is there
        report = pack(src, out, num_shards=3, shard_index=k)
        assert [os.path.basename(r.out) for r in report.shards] == [os.path.basename(shard_name(out, k, 3))]
        assert not os.path.exists(shard_index(out))
    before = {k: os.stat(shard_name(out, k, 3)).st_mtime_ns for k in (0, 2)}
    pack(src, out, num_shards=3, shard_index=1)  # the last one writes the index
    assert records(shard_index(out)) == single[ext]
    assert {k: os.stat(shard_name(out, k, 3)).st_mtime_ns for k in (0, 2)} == before  # nothing repacked
    os.remove(shard_index(out))
    from feedline.cli import main
    assert main(["pack", "--join", out]) == 0
    assert "wrote " + shard_index(out) in capsys.readouterr().out
    assert records(shard_index(out)) == single[ext]


def test_join_refuses_a_missing_shard_and_mixed_splits(src, tmp_path):
    out = str(tmp_path / "j.lmdb")
    pack(src, out, num_shards=3, shard_index=0)
    pack(src, out, num_shards=3, shard_index=2)
    with pytest.raises(StoreError, match="shard.s. 1 of 3 missing"):
        join_shards(out)
    pack(src, out, num_shards=2, shard_index=0)
    with pytest.raises(PackError, match="2 different splits"):
        join_shards(out)
    with pytest.raises(PackError, match="no shards to join"):
        join_shards(str(tmp_path / "other.lmdb"))


@pytest.mark.parametrize("ext", FORMATS)
def test_resume_keeps_complete_shards_and_continues_the_interrupted_one(src, single, tmp_path, monkeypatch, ext):
    import converters.packer as packer
    out = str(tmp_path / f"r.{ext}")
    paths = source_files(src)
    real, read = packer.check_file, []

    def interrupted_at_file_12(root, rel, options):
        if rel == paths[12]:
            raise KeyboardInterrupt
        return real(root, rel, options)

    with monkeypatch.context() as m:
        m.setattr(packer, "check_file", interrupted_at_file_12)
        with pytest.raises(KeyboardInterrupt):
            pack(src, out, num_shards=3, commit_every=2, jobs=1)
    assert os.path.exists(shard_name(out, 0, 3)) and not os.path.exists(shard_name(out, 1, 3))
    with pytest.raises(PackError, match="already exists"):
        pack(src, out, num_shards=3)

    def recording(root, rel, options):
        read.append(rel)
        return real(root, rel, options)

    with monkeypatch.context() as m:
        m.setattr(packer, "check_file", recording)
        report = pack(src, out, num_shards=3, commit_every=2, jobs=1, resume=True)
    # Shard 0 (files 0-6) is kept; shard 1 (7-14) resumes after its last commit (files 7-10).
    assert read == paths[11:]
    assert [r.resumed_from for r in report.shards] == [7, 4, 0]
    assert records(shard_index(out)) == single[ext]


# -- bad sets fail at open, naming the file -------------------------------------------------------

@pytest.fixture
def three(src, tmp_path) -> tuple[str, list[str]]:
    out = str(tmp_path / "b.lmdb")
    pack(src, out, num_shards=3)
    return out, [shard_name(out, k, 3) for k in range(3)]


def test_a_missing_shard(three, tmp_path):
    out, names = three
    os.remove(names[1])
    with pytest.raises(StoreError, match=r"shard b-00001-of-00003.lmdb is missing"):
        feedline.open_dataset(shard_index(out))
    with pytest.raises(StoreError, match=r"shard\(s\) 1 of 3 missing"):
        feedline.open_dataset(str(tmp_path / "b-*.lmdb"))
    with pytest.raises(StoreError, match=r"shard\(s\) 1 of 3 missing"):
        feedline.open_dataset([names[0], names[2]])


def test_a_duplicated_shard(three, tmp_path):
    out, names = three
    copy = str(tmp_path / "copy-of-1.lmdb")
    shutil.copy(names[1], copy)
    with pytest.raises(StoreError, match="are both shard 1 of 3") as err:
        feedline.open_dataset([*names, copy])
    assert "copy-of-1.lmdb" in str(err.value)
    with pytest.raises(StoreError, match="listed twice"):
        feedline.open_dataset([names[0], names[1], names[1], names[2]])
    index = json.loads(open(shard_index(out)).read())
    index["shards"][2] = index["shards"][1]
    open(shard_index(out), "w").write(json.dumps(index))
    with pytest.raises(StoreError, match="names a shard twice"):
        feedline.open_dataset(shard_index(out))


def test_shards_of_different_packs(three, src, tmp_path):
    out, names = three
    other = str(tmp_path / "q" / "b.lmdb")
    pack(src, other, num_shards=3, quality=80)  # other options: another pack
    mixed = [names[0], shard_name(other, 1, 3), names[2]]
    with pytest.raises(StoreError, match="shards of different packs"):
        feedline.open_dataset(mixed)
    shutil.copy(shard_name(other, 1, 3), names[1])  # a shard replaced under the same name
    with pytest.raises(StoreError, match="shards of different packs"):
        feedline.open_dataset(shard_index(out))
    for k in range(3):  # all replaced: a sound set, but not the one the index names
        shutil.copy(shard_name(other, k, 3), names[k])
    with pytest.raises(StoreError, match="belongs to another pack than the index"):
        feedline.open_dataset(shard_index(out))


def test_stores_with_different_classes_or_versions(tmp_path):
    records = make_records(n=6, classes=3)
    other = make_records(n=6, classes=2)
    a = write_lmdb(tmp_path / "a.lmdb", records)
    b = write_lmdb(tmp_path / "b.lmdb", other)
    with pytest.raises(StoreError, match="different class lists") as err:
        feedline.open_dataset([a, b])
    assert "a.lmdb" in str(err.value) and "b.lmdb" in str(err.value)
    old = write_lmdb(tmp_path / "old.lmdb", records, records.v1_meta())
    with pytest.raises(StoreError, match=r"different format versions \(1, 2\)"):
        feedline.open_dataset([a, old])
    h5 = write_hdf5(tmp_path / "c.h5", records)
    with pytest.raises(StoreError, match="different formats"):
        feedline.open_dataset([a, h5])
    with feedline.open_dataset([a, write_lmdb(tmp_path / "a2.lmdb", records)]) as both:  # alike: one data set
        assert len(both) == 12 and [bytes(both.read(i)) for i in range(12)] == records.images * 2
    records.pack_options = {"quality": 90, "check": "decode"}
    checked = write_lmdb(tmp_path / "checked.lmdb", records)
    with feedline.open_dataset([checked, a]) as mixed:  # only what every part shares holds for the set
        assert mixed.meta["pack_options"] == {"quality": 90}


def test_a_glob_matching_nothing_and_an_index_that_is_not_one(tmp_path):
    with pytest.raises(StoreError, match="matches no shard file"):
        feedline.open_dataset(str(tmp_path / "nothing-*.lmdb"))
    (tmp_path / "x.shards.json").write_text('{"format": "something else"}')
    with pytest.raises(StoreError, match="not a feedline shard index"):
        feedline.open_dataset(str(tmp_path / "x.shards.json"))
    (tmp_path / "y.shards.json").write_text('{"format": "feedline-shards", "version": 9}')
    with pytest.raises(StoreError, match="shard index version 9"):
        feedline.open_dataset(str(tmp_path / "y.shards.json"))


def test_opening_out_of_a_sharded_pack_points_to_its_index(three):
    out, _ = three
    with pytest.raises(StoreError, match="b.shards.json names the shards"):
        feedline.open_dataset(out)


# -- checks through the set ------------------------------------------------------------------------

def test_checksums_verify_and_info_across_shards(three, src, capsys):
    out, names = three
    from feedline.cli import main
    assert main(["info", shard_index(out)]) == 0
    text = capsys.readouterr().out
    assert "3 shards" in text and "b-00000-of-00003.lmdb" in text and f"records       {N}" in text
    with open(names[2], "r+b") as fh:  # damage shard 2: flip bytes of its last record's data
        fh.seek(os.path.getsize(names[2]) // 2)
        chunk = fh.read(2048)
        fh.seek(-len(chunk), os.SEEK_CUR)
        fh.write(bytes(b ^ 0xFF for b in chunk))
    with feedline.open_dataset(shard_index(out)) as ds:
        bad = []
        for i in range(len(ds)):
            try:
                if bytes(ds.read(i)) != open(os.path.join(src, ds.path(i)), "rb").read():
                    bad.append(i)
            except StoreError:
                bad.append(i)
        assert bad and all(i >= 15 for i in bad)  # shard 2 holds records 15..22
        for i in bad:
            with pytest.raises(StoreError) as err:
                ds.read_checked(i)
            if isinstance(err.value, ChecksumError):
                assert err.value.index == i and f"record {i}, in shard {names[2]}" in str(err.value)
    result = verify(shard_index(out), jobs=2, mode="checksums")
    assert sorted({p.index for p in result.problems if p.index is not None}) == bad
    with feedline.open_dataset(shard_index(out)) as ds:
        assert all(p.path == ds.path(p.index) for p in result.problems if p.index is not None)


def test_open_dataset_of_a_list_needs_at_least_one(tmp_path):
    with pytest.raises(FeedlineError, match="empty list"):
        feedline.open_dataset([])
