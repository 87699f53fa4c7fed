"""Sharded packs (converters/shards.py) resumed or repeated with options changed since the first
run: options that shape the output, or the split, refuse a resume naming what changed (not
"pass --resume", which was passed), and a complete data set's index is never replaced without
--overwrite; options that do not shape the output (threads, commit size) resume to the same
data set. Nothing already written is touched by a refusal."""
from __future__ import annotations

import json
import os

import pytest
from pack_helpers import interrupt_at
from test_shards import N, records

from converters import pack
from feedline.core.errors import PackError
from feedline.dataset.format import shard_index, shard_name
from feedline.sample import make_photo_folder

FIRST = dict(num_shards=3, commit_every=2, jobs=1)   # shard 0: files 0-6, shard 1: 7-14, shard 2: 15-22
REDO = "rerun with the same options, or start over with --overwrite and no --resume"


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("resume") / "src"
    make_photo_folder(str(root), n=N, classes=3, seed=6, sizes=[(96, 64), (64, 96), (80, 60)])
    return str(root)


def listing(folder) -> dict[str, int]:
    return {name: os.stat(os.path.join(folder, name)).st_mtime_ns for name in sorted(os.listdir(folder))}


def interrupted(src, out, monkeypatch, k: int = 13) -> None:
    """Ctrl-C at file k of the sorted list: with k = 13, shard 0 complete, shard 1 has 4 files committed."""
    with monkeypatch.context() as m:
        interrupt_at(m, src, k)
        with pytest.raises(KeyboardInterrupt):
            pack(src, out, progress=False, **FIRST)


@pytest.mark.parametrize("ext", ["lmdb", "h5"])
@pytest.mark.parametrize("change, says", [
    (dict(quality=80), "quality: 95 then, 80 now"),
    (dict(shuffle=3), "shuffle: None then, 3 now"),
    (dict(check="decode", max_side=64), "check: 'headers' then, 'decode' now, max_side: None then, 64 now")])
def test_a_resume_with_other_output_options_names_them(src, tmp_path, monkeypatch, ext, change, says):
    out = str(tmp_path / f"r.{ext}")
    interrupted(src, out, monkeypatch)
    before = listing(tmp_path)
    with pytest.raises(PackError) as err:
        pack(src, out, progress=False, resume=True, **{**FIRST, **change})
    assert str(err.value) == f"{shard_name(out, 0, 3)}: the interrupted pack used other options ({says}); {REDO}"
    assert listing(tmp_path) == before


@pytest.mark.parametrize("k, first", [(13, "r-00000-of-00003.lmdb"), (4, "r-00000-of-00003.lmdb.partial")])
def test_a_resume_with_another_split_names_both(src, tmp_path, monkeypatch, k, first):
    """Whether the first run completed a shard (k = 13) or only began one (k = 4)."""
    out = str(tmp_path / "r.lmdb")
    interrupted(src, out, monkeypatch, k)
    before = listing(tmp_path)
    for change in (dict(num_shards=4), dict(num_shards=None, shard_records=5)):
        with pytest.raises(PackError) as err:
            pack(src, out, progress=False, resume=True, **{**FIRST, **change})
        now = 4 if change.get("num_shards") else 5
        assert str(err.value) == (f"{tmp_path / first}: the interrupted pack cut the files into 3 shards, this run "
                                  f"into {now}; rerun with the same --num-shards or --shard-size, or start over with "
                                  "--overwrite and no --resume")
    assert listing(tmp_path) == before


def test_threads_and_commit_size_may_change_on_resume(src, tmp_path, monkeypatch):
    whole = records(str(tmp_path / "whole.lmdb"), pack_first=src)
    out = str(tmp_path / "r.lmdb")
    interrupted(src, out, monkeypatch)
    report = pack(src, out, progress=False, resume=True, num_shards=3, commit_every=3, jobs=2)
    assert [r.resumed_from for r in report.shards] == [7, 4, 0]
    assert records(shard_index(out)) == whole


def test_a_complete_set_is_replaced_only_with_overwrite(src, tmp_path):
    out = str(tmp_path / "c.lmdb")
    pack(src, out, num_shards=3, progress=False)
    index = shard_index(out)
    before = listing(tmp_path)
    for change, why in [(dict(num_shards=4), "cut the files into 3 shards, this run into 4"),
                        (dict(num_shards=3, quality=80), "used other options (quality: 95 then, 80 now)")]:
        for resume in (False, True):
            with pytest.raises(PackError) as err:
                pack(src, out, progress=False, resume=resume, **change)
            assert str(err.value) == f"{index}: a complete data set whose pack {why}; pass --overwrite to replace it"
    assert listing(tmp_path) == before
    again = pack(src, out, num_shards=3, progress=False, resume=True)   # the same pack: reported, kept
    assert again.packed == N and [r.resumed_from for r in again.shards] == [7, 8, 8]
    assert {k: v for k, v in listing(tmp_path).items() if k != "c.shards.json"} == \
        {k: v for k, v in before.items() if k != "c.shards.json"}
    pack(src, out, num_shards=4, progress=False, overwrite=True)
    with open(index) as fh:
        assert len(json.load(fh)["shards"]) == 4 and len(records(index)) == N
    assert os.path.exists(shard_name(out, 3, 4))


def test_the_command_line_says_it_in_one_line(src, tmp_path, monkeypatch, capsys):
    from feedline.cli import main
    out = str(tmp_path / "r.lmdb")
    interrupted(src, out, monkeypatch)
    assert main(["pack", src, out, "--num-shards", "3", "--resume", "--quality", "80", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == (f"feedline pack: error: {shard_name(out, 0, 3)}: the interrupted pack used other options "
                   f"(quality: 95 then, 80 now); {REDO}\n")


def test_an_index_that_is_not_one_is_replaced_only_with_overwrite(src, tmp_path):
    out = str(tmp_path / "d.lmdb")
    with open(shard_index(out), "w") as fh:
        fh.write("[1, 2")
    with pytest.raises(PackError) as err:
        pack(src, out, num_shards=2, progress=False, resume=True)
    assert str(err.value) == (f"{shard_index(out)} already exists and is not a shard index feedline wrote; pass "
                              "--overwrite to replace it")
    assert os.listdir(tmp_path) == ["d.shards.json"]
    pack(src, out, num_shards=2, progress=False, overwrite=True)
    assert len(records(shard_index(out))) == N


def test_shards_kept_by_a_resume_report_their_skipped_files(tmp_path):
    """A folder with bad files (listed in each shard's errors.csv): a resumed pack whose shards
    are all done reports each shard's skips and error report, and resumed after all its files."""
    from pack_helpers import mixed_folder
    src = mixed_folder(tmp_path / "src", n=10, seed=8, converted="class_001", bad=("class_000", "class_001"))
    out = str(tmp_path / "m.lmdb")
    first = pack(src, out, num_shards=2, progress=False)
    again = pack(src, out, num_shards=2, progress=False, resume=True)
    for was, now in zip(first.shards, again.shards):
        assert sorted(s.path for s in now.skipped) == sorted(s.path for s in was.skipped)
        assert now.error_report == (was.out + ".errors.csv" if was.skipped else None)
        assert now.resumed_from == now.found == was.found and now.packed == was.packed
    assert sum(bool(r.skipped) for r in again.shards) >= 1 and again.packed == first.packed


def test_a_second_pack_without_resume_says_what_to_pass_before_packing(src, tmp_path, monkeypatch):
    out = str(tmp_path / "r.lmdb")
    interrupted(src, out, monkeypatch)
    before = listing(tmp_path)
    with pytest.raises(PackError) as err:
        pack(src, out, progress=False, **FIRST)
    assert str(err.value) == (f"{shard_name(out, 0, 3)} already exists (1 of the shards to pack do); pass --resume "
                              "to keep the complete shards of this pack, or --overwrite to replace them")
    assert listing(tmp_path) == before


def test_the_log_the_format_and_what_the_labels_file_leaves_out(src, tmp_path, caplog):
    """--format for an OUT whose extension says nothing; a labels file's left-out file is
    reported once, with shard 0; what a split across machines and a resume log."""
    rels = sorted(os.path.relpath(os.path.join(d, f), src) for d, _, fs in os.walk(src) for f in fs)
    labels = tmp_path / "labels.csv"
    labels.write_text("".join(f"{rel},{rel.split('/')[0]}\n" for rel in rels[1:]))
    out = str(tmp_path / "s.data")
    caplog.set_level("INFO", logger="converters.shards")
    first = pack(src, out, num_shards=2, shard_index=1, format="lmdb", labels_csv=str(labels), progress=False)
    assert (first.format, [s.path for s in first.skipped]) == ("lmdb", [])
    assert (f"1 of 2 shards of {out} are here; once all are, `feedline pack --join {out}` writes the index (the run "
            "that packs the last one writes it too)") in caplog.messages
    report = pack(src, out, num_shards=2, format="lmdb", labels_csv=str(labels), progress=False, resume=True)
    assert [[s.path for s in r.skipped] for r in report.shards] == [[rels[0]], []] and report.format == "lmdb"
    assert f"{shard_name(out, 1, 2)}: already packed (resume)" in caplog.messages
    assert f"{shard_index(out)}: 2 shards, {N - 1} records" in caplog.messages
