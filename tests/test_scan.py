"""Scanning an image folder: symlinks (loops, repeats, file links), labels from a CSV
(header rows, integer labels, unlisted and missing files), and a SRC that is a file.
Real links and real packs; the errors report is read back as CSV."""
from __future__ import annotations

import csv
import logging
import os

import pytest

import feedline
from converters import pack
from feedline.core.errors import FeedlineError
from feedline.sample import make_photo_folder
from feedline.dataset.scan import scan_folder

SIZES = [(64, 48)]


def photos(root, n: int = 6, classes: int = 2, seed: int = 0) -> str:
    make_photo_folder(str(root), n=n, classes=classes, seed=seed, sizes=SIZES)
    return str(root)


def report_rows(out: str) -> list[list[str]]:
    with open(out + ".errors.csv", newline="") as fh:
        return list(csv.reader(fh))[1:]


def packed_paths(out: str) -> dict[str, int]:
    with feedline.open_dataset(out) as ds:
        return {ds.path(i): ds.label(i) for i in range(len(ds))}


# -- symlinks ------------------------------------------------------------------------------------

@pytest.mark.parametrize("ext", ["lmdb", "h5"])
def test_a_link_back_up_is_a_loop_listed_and_not_followed(tmp_path, ext):
    """The issue's corpus: zbad/loop_link -> .. packed every file a second time, labelled zbad."""
    src = photos(tmp_path / "src", n=6, classes=2)
    make_photo_folder(str(tmp_path / "src" / "zbad"), n=1, classes=1, seed=5, sizes=SIZES)
    os.symlink("..", tmp_path / "src" / "zbad" / "loop_link")
    out = str(tmp_path / f"o.{ext}")
    report = pack(src, out)
    paths = packed_paths(out)
    assert len(paths) == 7 and not any("loop_link" in p for p in paths)
    with feedline.open_dataset(out) as ds:
        assert ds.classes == ["class_000", "class_001", "zbad"]
    assert {p: lab for p, lab in paths.items() if p.startswith("zbad/")} == {"zbad/class_000/img_0000000.jpg": 2}
    rows = report_rows(out)
    assert [r[:2] for r in rows] == [["zbad/loop_link", "symlink-loop"]]
    assert "symlink loop" in rows[0][2] and "-> .." in rows[0][2]
    assert report.found == 8 and report.packed == 7 and [s.path for s in report.skipped] == ["zbad/loop_link"]


def test_a_link_to_itself_and_a_top_level_loop_class(tmp_path):
    src = photos(tmp_path / "src", n=4, classes=2)
    os.symlink(".", tmp_path / "src" / "class_000" / "self")
    os.symlink(".", tmp_path / "src" / "up")           # a class folder that is the top folder
    scan = scan_folder(src)
    assert scan.classes == ["class_000", "class_001"]
    assert scan.paths == ["class_000/img_0000000.jpg", "class_000/img_0000002.jpg",
                          "class_001/img_0000001.jpg", "class_001/img_0000003.jpg"]
    assert sorted((p.path, p.reason) for p in scan.problems) == [("class_000/self", "symlink-loop"),
                                                                 ("up", "symlink-loop")]


def test_links_to_folders_already_packed_are_repeats_whichever_sorts_first(tmp_path):
    src = photos(tmp_path / "src", n=4, classes=2)
    os.symlink("../class_001", tmp_path / "src" / "class_000" / "a_alias")  # sorts before its target's class
    os.symlink("class_000", tmp_path / "src" / "class_alias")                 # a class that is another class
    scan = scan_folder(src)
    assert scan.classes == ["class_000", "class_001"]
    assert len(scan.paths) == 4 and not any("alias" in p for p in scan.paths)
    problems = {p.path: p for p in scan.problems}
    assert set(problems) == {"class_000/a_alias", "class_alias"}
    assert all(p.reason == "symlink-repeat" for p in problems.values())
    assert "class_001" in problems["class_000/a_alias"].detail


def test_a_link_to_a_folder_outside_is_followed_once(tmp_path):
    src = photos(tmp_path / "src", n=2, classes=1)
    outside = photos(tmp_path / "elsewhere", n=2, classes=1, seed=3)
    os.symlink(os.path.join(outside, "class_000"), tmp_path / "src" / "class_000" / "more")
    os.symlink(os.path.join(outside, "class_000"), tmp_path / "src" / "class_000" / "more_again")
    scan = scan_folder(src)
    assert scan.paths == ["class_000/img_0000000.jpg", "class_000/img_0000001.jpg",
                          "class_000/more/img_0000000.jpg", "class_000/more/img_0000001.jpg"]
    assert [(p.path, p.reason) for p in scan.problems] == [("class_000/more_again", "symlink-repeat")]


def test_a_file_link_is_packed_once_under_its_own_path(tmp_path):
    src = photos(tmp_path / "src", n=2, classes=2)
    os.symlink("../class_000/img_0000000.jpg", tmp_path / "src" / "class_001" / "linked.jpg")
    out = str(tmp_path / "o.lmdb")
    pack(src, out)
    paths = packed_paths(out)
    assert paths == {"class_000/img_0000000.jpg": 0, "class_001/img_0000001.jpg": 1, "class_001/linked.jpg": 1}
    with feedline.open_dataset(out) as ds:
        by_path = {ds.path(i): bytes(ds.read(i)) for i in range(len(ds))}
    assert by_path["class_001/linked.jpg"] == by_path["class_000/img_0000000.jpg"]
    assert not os.path.exists(out + ".errors.csv")


def test_pack_help_states_the_symlink_rules():
    import argparse

    from feedline.cli import pack as cli_pack
    parser = argparse.ArgumentParser(prog="feedline")
    cli_pack.register(parser.add_subparsers(dest="command"))
    text = " ".join(parser._subparsers._group_actions[0].choices["pack"].format_help().split())
    assert "A folder link is followed only to a folder not already on the walk" in text
    assert "a file link is packed once, under its own path" in text and "symlink-loop" in text


# -- labels from a CSV ---------------------------------------------------------------------------

@pytest.fixture
def six(tmp_path) -> tuple[str, list[str]]:
    src = photos(tmp_path / "src", n=6, classes=2)
    rels = sorted(os.path.relpath(os.path.join(d, f), src) for d, _, fs in os.walk(src) for f in fs)
    return src, rels


@pytest.mark.parametrize("header", ["relative path,label", "path,label", "file,class", "filename,category",
                                    "image,y", "Where,What", None])
def test_header_rows_are_recognized_and_integer_labels_kept(six, tmp_path, header):
    src, rels = six
    labels = [7, 3, 7, 0, 3, 7]
    lines = ([header] if header else []) + [f"{r},{lab}" for r, lab in zip(rels, labels, strict=True)]
    (tmp_path / "labels.csv").write_text("\n".join(lines) + "\n")
    out = str(tmp_path / "o.h5")
    report = pack(src, out, labels_csv=str(tmp_path / "labels.csv"))
    assert report.skipped == [] and report.packed == 6
    assert packed_paths(out) == dict(zip(rels, labels, strict=True))
    with feedline.open_dataset(out) as ds:
        assert ds.classes == [str(k) for k in range(8)]


def test_named_labels_are_numbered_in_sorted_order(six, tmp_path):
    src, rels = six
    names = ["dog", "cat", "dog", "emu", "cat", "dog"]
    (tmp_path / "l.csv").write_text("path,label\n" + "".join(f"{r},{n}\n" for r, n in zip(rels, names, strict=True)))
    scan = scan_folder(src, str(tmp_path / "l.csv"))
    assert scan.classes == ["cat", "dog", "emu"]
    assert dict(zip(scan.paths, scan.labels, strict=True)) == \
        {r: ["cat", "dog", "emu"].index(n) for r, n in zip(rels, names, strict=True)}


@pytest.mark.parametrize("kind, unlisted, unit", [("csv", "not-in-labels-csv", "row"),
                                                    ("jsonl", "not-in-labels-jsonl", "line")])
def test_unlisted_images_and_missing_rows_are_reported_once(six, tmp_path, capsys, caplog, kind, unlisted, unit):
    """Named for the labels file's kind, in OUT.errors.csv and once in what `feedline pack` says
    (its summary), not a second time by the scan; a folder read as a store logs them."""
    import json

    from feedline.cli import main as cli_main
    from feedline.stores import open_dataset
    src, rels = six
    listed = [*rels[:4], "class_000/gone.jpg"]
    labels = tmp_path / f"l.{kind}"
    labels.write_text("".join(f"{r},1\n" if kind == "csv" else json.dumps({"path": r, "label": 1}) + "\n"
                              for r in listed))
    out = str(tmp_path / "o.lmdb")
    caplog.set_level(logging.WARNING)
    assert cli_main(["pack", str(src), out, "--labels", str(labels)]) == 0
    assert sorted(packed_paths(out)) == listed[:4]
    rows = {r[0]: r[1:] for r in report_rows(out)}
    assert rows == {"class_000/gone.jpg": ["missing", f"listed in l.{kind} ({unit} 5), but there is no such file in "
                                                      "the folder"],
                    **{r: [unlisted, f"in the folder, but l.{kind} has no {unit} for it; not packed"] for r in rels[4:6]}}
    said = capsys.readouterr().out + caplog.text
    assert said.count(unlisted) == 1 and f"skipped: 3 (missing: 1, {unlisted}: 2)" in said
    caplog.clear()
    store = open_dataset(str(src), labels_csv=str(labels))
    assert len(store) == 4
    assert f"2 file(s) ({unlisted}) left out: {rels[4]}" in caplog.text
    assert "1 file(s) (missing) left out: class_000/gone.jpg" in caplog.text


@pytest.mark.parametrize("content, match", [
    ("a.jpg,1\na.jpg,2\n", "row 2 lists a.jpg again"),
    ("../x.jpg,1\n", "not a path inside the image folder"),
    ("a.jpg\n", "row 1 needs two columns"),
    ("path,label\n", "no rows"),
    ("a.jpg,-1\n", ">= 0"),
])
def test_bad_labels_files_are_refused_with_the_row(six, tmp_path, content, match):
    (tmp_path / "l.csv").write_text(content)
    with pytest.raises(FeedlineError, match=match):
        scan_folder(six[0], str(tmp_path / "l.csv"))


# -- SRC ------------------------------------------------------------------------------------------

def test_a_file_given_as_src_says_it_is_a_file(tmp_path):
    (tmp_path / "photo.jpg").write_bytes(b"\xff\xd8")
    with pytest.raises(FeedlineError, match="is a file, not a folder"):
        pack(str(tmp_path / "photo.jpg"), str(tmp_path / "o.lmdb"))
    with pytest.raises(FeedlineError, match="no such folder"):
        pack(str(tmp_path / "nope"), str(tmp_path / "o.lmdb"))


@pytest.mark.parametrize("ext", ["lmdb", "h5"])
def test_an_image_beside_the_class_folders_is_listed_not_dropped_silently(tmp_path, ext):
    root = photos(tmp_path / "src")
    stray = os.path.join(root, "class_000", "img_0000000.jpg")
    with open(stray, "rb") as fh:
        data = fh.read()
    with open(os.path.join(root, "stray.jpg"), "wb") as fh:
        fh.write(data)
    with open(os.path.join(root, "notes.txt"), "w") as fh:   # not an image: not listed
        fh.write("x")
    scan = scan_folder(root)
    assert "stray.jpg" not in scan.paths and scan.classes == ["class_000", "class_001"]
    assert [(p.path, p.reason) for p in scan.problems] == [("stray.jpg", "no-class")]
    out = str(tmp_path / f"out.{ext}")
    report = pack(root, out)
    assert report.found == 7 and report.packed == 6
    assert report_rows(out) == [["stray.jpg", "no-class", "an image beside the class folders belongs to no class; "
                                                          "not packed (move it into a class folder)"]]
