"""The pack journal (converters/journal.py) and resume: a resumed pack reports and says what an
uninterrupted one does, the journal lists each chunk, a pack interrupted twice resumes twice,
and a resume with other options, other labels or too little room is refused, naming why."""
from __future__ import annotations

import json
import logging
import os
import sys

import pytest
from pack_helpers import (
    Terminal, big, feedline_format, interrupt_at, interrupted, mixed, records_of, report_fields, source_size,
    stored_as_sources)

import feedline
from converters import pack
from feedline.core.errors import PackError
from feedline.dataset.format import checksum


SMALL_DISK = ("12m", "64m")   # conftest's small_disk: room for the staged images, not for a copy of them too


@pytest.mark.parametrize("ext", ["lmdb", "h5"])
def test_a_resumed_pack_reports_and_says_what_an_uninterrupted_one_does(mixed, tmp_path, monkeypatch, caplog, ext):
    whole = pack(mixed, str(tmp_path / f"whole.{ext}"), commit_every=3)
    assert whole.converted == 3 and len(whole.skipped) == 2 and whole.packed == 13 and whole.found == 15
    out = str(tmp_path / f"o.{ext}")
    caplog.set_level(logging.INFO, logger="converters.packer")
    with monkeypatch.context() as m:
        interrupt_at(m, mixed, 11)
        with pytest.raises(KeyboardInterrupt):
            pack(mixed, out, commit_every=3, jobs=1)
    said = [r.getMessage() for r in caplog.records if r.name == "converters.packer"]
    assert said == [f"interrupted: 9 of 15 files committed in {out}.partial; rerun with --resume to continue"]
    caplog.clear()
    resumed = pack(mixed, out, commit_every=3, resume=True)
    said = [r.getMessage() for r in caplog.records if r.name == "converters.packer"]
    assert said == ["resuming after 9 of 15 files"]
    assert resumed.resumed_from == 9
    assert report_fields(resumed) == report_fields(whole)
    assert resumed.error_report == out + ".errors.csv"
    assert resumed.bytes_out == sum(len(r) for r in records_of(out)) and resumed.bytes_in > 0
    caplog.clear()
    again = str(tmp_path / f"fresh.{ext}")
    assert report_fields(pack(mixed, again, commit_every=3, resume=True)) == report_fields(whole)
    said = [r.getMessage() for r in caplog.records if r.name == "converters.packer"]
    assert said == [f"{again}.partial: nothing to resume; packing from the start"]


def test_the_journal_of_an_interrupted_pack_lists_each_chunk(mixed, tmp_path, monkeypatch):
    """Read straight from the staging journal: chunk numbers, files consumed, first records,
    the options and input digest, and per record its label, size, path, length and checksum."""
    import json

    from converters import PackOptions
    from converters.journal import scan_digest
    from feedline.dataset.format import checksum
    from feedline.dataset.scan import scan_folder
    out = str(tmp_path / "o.h5")
    interrupted(mixed, out, monkeypatch)
    _, *entries = [json.loads(line) for line in open(out + ".partial.journal", "rb").read().splitlines()]
    scan = scan_folder(mixed)
    assert [(e["chunk"], e["consumed"], e["first_record"]) for e in entries] == [(0, 3, 0), (1, 6, 2), (2, 9, 5)]
    assert entries[0]["skipped"] == [["class_000/empty.jpg", "empty", "zero-byte file"]]
    with feedline.open_dataset(pack(mixed, str(tmp_path / "whole.h5")).out) as ds:   # what the records become
        final = {ds.path(i): (ds.label(i), list(ds.size(i)), bytes(ds.read(i))) for i in range(len(ds))}
    converted = {"class_001/cmyk.jpg", "class_001/rgba.png", "class_001/rotated.jpg"}
    for e in entries:
        assert e["options"] == PackOptions(commit_every=3).output_options(feedline_format("h5"))
        assert e["digest"] == scan_digest(scan) and e["version"] == 2
        assert e["paths"] == [p for p in scan.paths[e["consumed"] - 3:e["consumed"]] if p in final]
        for label, size, path, length, sums in zip(e["labels"], e["sizes"], e["paths"], e["lengths"], e["checksums"]):
            data = final[path][2]
            assert (label, size, length, sums) == (final[path][0], final[path][1], len(data), checksum(data))
            assert label == scan.labels[scan.paths.index(path)]
        assert e["converted"] == len(converted & set(e["paths"]))
        assert e["source_bytes"] == sum(source_size(mixed, p) for p in e["paths"])


def test_a_pack_interrupted_twice_resumes_twice_to_the_same_data_set(mixed, tmp_path, monkeypatch):
    out = str(tmp_path / "o.lmdb")
    interrupted(mixed, out, monkeypatch, k=5)
    with monkeypatch.context() as m:
        interrupt_at(m, mixed, 12)
        with pytest.raises(KeyboardInterrupt):
            pack(mixed, out, commit_every=3, jobs=1, resume=True)
    report = pack(mixed, out, commit_every=3, resume=True)
    assert report.resumed_from == 9
    whole = pack(mixed, str(tmp_path / "whole.lmdb"), commit_every=3)
    assert records_of(out) == records_of(whole.out) and report_fields(report) == report_fields(whole)


def test_the_progress_bar_of_a_resumed_pack_starts_where_it_stopped(mixed, tmp_path, monkeypatch):
    out = str(tmp_path / "o.lmdb")
    interrupted(mixed, out, monkeypatch)
    screen = Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    pack(mixed, out, commit_every=3, resume=True)
    assert screen.getvalue().split("\r")[-1].startswith("pack: 100%") and "15/15" in screen.getvalue()
    assert " 9/15" in screen.getvalue()
    quiet = Terminal()
    monkeypatch.setattr(sys, "stderr", quiet)
    pack(mixed, str(tmp_path / "q.lmdb"), progress=False)
    assert quiet.getvalue() == ""


def test_resume_is_refused_when_the_labels_csv_renamed_a_class_or_relabelled_a_file(mixed, tmp_path, monkeypatch):
    """The same files under other class names, or one file under another class, is another data
    set: the journal's input digest covers the class names and every file's label."""
    from feedline.dataset.scan import scan_folder
    photos = [p for p in scan_folder(mixed).paths if "/img_" in p]
    csv = tmp_path / "labels.csv"

    def write(names, relabel=None):
        csv.write_text("path,label\n" + "".join(
            f"{p},{names[(i + (p == relabel)) % 2]}\n" for i, p in enumerate(photos)))
    write(["cat", "dog"])
    out = str(tmp_path / "o.lmdb")
    with monkeypatch.context() as m:
        interrupt_at(m, mixed, scan_folder(mixed).paths.index(photos[5]) + 1)   # after 2 commits
        with pytest.raises(KeyboardInterrupt):
            pack(mixed, out, labels_csv=str(csv), commit_every=2, jobs=1)
    for names, relabel in ((["lion", "wolf"], None), (["cat", "dog"], photos[-1])):
        write(names, relabel)
        with pytest.raises(PackError) as err:
            pack(mixed, out, labels_csv=str(csv), commit_every=2, resume=True)
        assert str(err.value) == (f"{out}.partial: the source folder changed since the interrupted pack "
                                  "(files or labels differ); start over without --resume")
    write(["cat", "dog"])
    report = pack(mixed, out, labels_csv=str(csv), commit_every=2, resume=True)
    whole = pack(mixed, str(tmp_path / "whole.lmdb"), labels_csv=str(csv), commit_every=2)
    assert report.resumed_from == 4 and records_of(out) == records_of(whole.out)
    assert (whole.found, whole.packed, whole.skipped_by_reason) == (15, 10, {"not-in-labels-csv": 5})
    assert report_fields(report) == report_fields(whole)


def test_resume_refused_for_room_keeps_what_is_committed(big, small_disk, tmp_path, monkeypatch):
    from feedline.core.errors import DiskFullError
    out = str(small_disk.path / "o.lmdb")
    with monkeypatch.context() as m:
        interrupt_at(m, big, 4)
        with pytest.raises(KeyboardInterrupt):
            pack(big, out, commit_every=3, jobs=1)
    (small_disk.path / "ballast").write_bytes(b"\0" * (8 << 20))   # the rest no longer fits
    with pytest.raises(DiskFullError):
        pack(big, out, commit_every=3, resume=True)
    assert sorted(os.listdir(small_disk.path)) == ["ballast", "o.lmdb.partial"]   # kept for a later resume
    os.remove(small_disk.path / "ballast")
    assert pack(big, out, commit_every=3, resume=True).resumed_from == 3
    assert stored_as_sources(out, big) == 7


def test_resume_with_other_options_lists_every_difference(mixed, tmp_path, monkeypatch):
    out = str(tmp_path / "o.h5")
    interrupted(mixed, out, monkeypatch)
    with pytest.raises(PackError) as err:
        pack(mixed, out, commit_every=3, quality=80, max_side=64, resume=True)
    assert str(err.value) == (f"{out}.partial: the interrupted pack used other options (max_side: None then, 64 now, "
                              "quality: 95 then, 80 now); rerun with the same options, or start over with "
                              "--overwrite and no --resume")


def test_resume_is_refused_when_a_labels_file_changed_a_target_value(tmp_path, monkeypatch):
    """The same files and labels with another `target` value is another data set: the input
    digest covers the values of the fields beyond label, for a complete OUT and a partial one."""
    from targets_helpers import labelled_folder
    src, labels = labelled_folder(str(tmp_path), n=8, fields=("label", "target"))
    out = str(tmp_path / "o.lmdb")
    pack(src, out, labels_csv=labels, commit_every=2)
    assert pack(src, out, labels_csv=labels, resume=True, commit_every=2).already_complete
    rows = [json.loads(line) for line in open(labels)]
    rows[3]["target"][1] += 1.0
    with open(labels, "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    with pytest.raises(PackError, match="complete but was packed from other input"):
        pack(src, out, labels_csv=labels, resume=True, commit_every=2)
    partial = str(tmp_path / "p.lmdb")
    with monkeypatch.context() as m:
        interrupt_at(m, src, 5)
        with pytest.raises(KeyboardInterrupt):
            pack(src, partial, labels_csv=labels, commit_every=2, jobs=1)
    rows[6]["target"][0] -= 1.0
    with open(labels, "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    with pytest.raises(PackError, match="source folder changed since the interrupted pack"):
        pack(src, partial, labels_csv=labels, commit_every=2, resume=True)


@pytest.mark.parametrize("ext", ["lmdb", "h5"])
def test_threads_and_commit_size_may_change_on_resume(mixed, tmp_path, monkeypatch, ext):
    """Neither shapes the output (they are not in the journal's options): the resumed pack goes
    on from the last commit and ends as an uninterrupted one."""
    whole = records_of(pack(mixed, str(tmp_path / f"whole.{ext}")).out)
    out = str(tmp_path / f"o.{ext}")
    interrupted(mixed, out, monkeypatch)
    report = pack(mixed, out, commit_every=5, jobs=2, resume=True)
    assert report.resumed_from == 9 and records_of(out) == whole
