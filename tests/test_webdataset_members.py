"""converters/webdataset.py, member by member: which tar members make a sample (WebDataset's key
is the name up to the first dot of its base name; directories, names without a suffix and
hidden files are no sample's part), which .json and .cls values are labels, and every refusal
of bad input in full: it names the tar, the sample or the file, and what to do."""
from __future__ import annotations

import json
import os
import tarfile

import pytest
from test_webdataset import add, packed, photos, tar_of

from converters import pack
from feedline.core.errors import FeedlineError


def test_members_that_are_no_samples_part_are_passed_over(photo_folder, tmp_path, caplog):
    """A directory entry, a file without a suffix and a hidden file come first in the tar; a
    key with only a label (no image) comes before a full sample; 'x.1.jpg' has the key x and the
    suffix 1.jpg (not an image); './c.jpg' and 'c.cls' share the key c."""
    a, c, x = photos(photo_folder, 3)
    path = tmp_path / "t.tar"
    with tarfile.open(path, "w") as tar:
        folder = tarfile.TarInfo("sub")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        for name, data in [("README", b"about"), (".jpg", x), (".cls", b"1"), ("0.cls", b"1"),
                           ("a.jpg", a), ("a.cls", b"0"), ("./c.jpg", c), ("c.cls", b"1"),
                           ("x.1.jpg", x), ("x.1.cls", b"0")]:
            add(tar, name, data)
    assert packed(str(path), tmp_path / "o.lmdb") == [("t/a.jpg", a, {"label": 0}), ("t/c.jpg", c, {"label": 1})]
    assert "no label" not in caplog.text and not (tmp_path / "o.lmdb.errors.csv").exists()


def test_which_json_values_are_labels(photo_folder, tmp_path, caplog):
    """A bare integer or string is the label; true is not; "label" wins over "cls"."""
    a, b, c, d = photos(photo_folder, 4)
    tar = tar_of(tmp_path / "t.tar", [("a.jpg", a), ("a.json", b"3"), ("b.jpg", b), ("b.json", b'"7"'),
                                      ("c.jpg", c), ("c.json", b'{"label": 2, "cls": 5}'),
                                      ("d.jpg", d), ("d.json", b"true")])
    assert [(p, t) for p, _, t in packed(tar, tmp_path / "o.lmdb")] == [
        ("t/a.jpg", {"label": 3}), ("t/b.jpg", {"label": 7}), ("t/c.jpg", {"label": 2})]
    assert "1 image(s) in the tar files have no label" in caplog.text and f"{tar}: sample d" in caplog.text


def test_a_cls_is_read_as_a_labels_files_cell(photo_folder, tmp_path):
    a, b = photos(photo_folder, 2)
    tar = tar_of(tmp_path / "t.tar", [("a.jpg", a), ("a.cls", b"007\n"), ("b.jpg", b), ("b.cls", b"2")])
    assert [t for _, _, t in packed(tar, tmp_path / "o.lmdb")] == [{"label": 7}, {"label": 2}]
    names = tar_of(tmp_path / "n.tar", [("a.jpg", a), ("a.cls", "tanche\u0301".encode()), ("b.jpg", b),
                                        ("b.cls", b"goldfish")])
    assert [t for _, _, t in packed(names, tmp_path / "n.lmdb")] == [{"label": 1}, {"label": 0}]


def error_of(src, tmp_path) -> str:
    with pytest.raises(FeedlineError) as err:
        pack(src, str(tmp_path / "x.lmdb"), progress=False)
    assert not os.path.exists(tmp_path / "x.lmdb")
    return str(err.value)


def test_bad_sample_files_name_the_tar_and_the_sample(photo_folder, tmp_path):
    (a,) = photos(photo_folder, 1)
    tar = tar_of(tmp_path / "j.tar", [("a.jpg", a), ("a.json", b"{label: 1}")])
    assert error_of(tar, tmp_path) == (f"{tar}: a.json is not JSON (Expecting property name enclosed in double "
                                       "quotes: line 1 column 2 (char 1))")
    tar = tar_of(tmp_path / "c.tar", [("a.jpg", a), ("a.cls", b"\xff\xfe")])
    assert error_of(tar, tmp_path) == (f"{tar}: a.cls is not UTF-8 text ('utf-8' codec can't decode byte 0xff in "
                                       "position 0: invalid start byte)")


def test_samples_of_two_tars_with_different_fields_name_both_tars(photo_folder, tmp_path):
    a, b = photos(photo_folder, 2)
    first = tar_of(tmp_path / "a.tar", [("a.jpg", a), ("a.json", json.dumps({"label": 1, "target": 0.5}).encode())])
    second = tar_of(tmp_path / "b.tar", [("b.jpg", b), ("b.cls", b"1")])
    assert error_of([first, second], tmp_path) == (
        f"{second}: sample b has label, but sample a (a.tar) has label, target: every sample needs the same fields "
        "(KEY.cls gives a label; KEY.json the fields it names)")


def test_tars_without_labels_say_so_naming_the_first(photo_folder, tmp_path):
    (a,) = photos(photo_folder, 1)
    one = tar_of(tmp_path / "one.tar", [("a.jpg", a)])
    two = tar_of(tmp_path / "two.tar", [("b.jpg", a)])
    looked = "no labelled images in the tar files (looked for KEY.jpg/.jpeg/.png with KEY.cls or KEY.json beside it)"
    assert error_of(one, tmp_path) == f"{one}: {looked}"
    assert error_of([one, two], tmp_path) == f"{one} ...: {looked}"


def test_what_is_not_tar_input_and_bad_lists_of_tars(photo_folder, tmp_path):
    from converters.webdataset import tar_inputs
    (tmp_path / "images.tar").mkdir()
    assert tar_inputs(str(tmp_path / "images.tar")) is None   # a folder so named is an image folder
    assert tar_inputs(str(tmp_path / "images")) is None
    missing = str(tmp_path / "X-missing.tar")
    assert error_of(missing, tmp_path) == f"{missing}: no such file"   # a plain name is not a pattern
    (a,) = photos(photo_folder, 1)
    tar = tar_of(tmp_path / "t.tar", [("a.jpg", a), ("a.cls", b"0")])
    assert error_of([tar, str(tmp_path / "labels.txt")], tmp_path) == (
        f"{tmp_path / 'labels.txt'}: not a .tar file; give WebDataset .tar shards, or an image folder")
    assert error_of([tar, missing], tmp_path) == f"{missing}: no such file"
    os.makedirs(tmp_path / "other")
    again = tar_of(tmp_path / "other" / "t.tar", [("a.jpg", a), ("a.cls", b"0")])
    assert error_of([tar, again], tmp_path) == (f"{tar}: two tar files of the same name; each shard's name must "
                                                "be its own")
