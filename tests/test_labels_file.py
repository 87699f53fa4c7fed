"""Labels files with named columns (CSV and JSON Lines): what each column means, and every
would-be misreading refused with the file, the row and what to write instead, or warned about."""
from __future__ import annotations

import json
import logging
import os

import pytest

from feedline.core.errors import FeedlineError
from feedline.dataset.labels_file import read_labels_file
from feedline.dataset.scan import scan_folder


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def jsonl(tmp_path, rows: list[dict], name: str = "l.jsonl") -> str:
    return write(tmp_path, name, "".join(json.dumps(r) + "\n" for r in rows))


# -- what the columns mean ----------------------------------------------------------------------

def test_csv_columns_label_labels_target(tmp_path):
    path = write(tmp_path, "l.csv", "path,label,labels,target\n"
                                    "a.jpg,dog,cat;emu,0.5;2\n"
                                    "b.jpg,cat,,1;-3.25\n"
                                    "c.jpg,emu,emu;cat;emu,4;5\n")
    table = read_labels_file(path)
    assert table.classes == ["cat", "dog", "emu"] and table.unit == "row"
    assert table.fields == {"label": {}, "labels": {"max": 2}, "target": {"width": 2, "scalar": False}}
    assert table.labels == [1, 0, 2]
    assert table.class_lists == {"label": ["cat", "dog", "emu"], "labels": ["cat", "emu"]}   # a list each
    assert [table.targets.record(i) for i in range(3)] == [
        {"labels": [0, 1], "target": [0.5, 2.0]},
        {"labels": [], "target": [1.0, -3.25]},
        {"labels": [1, 0], "target": [4.0, 5.0]}]          # a repeated class counts once
    assert table.rows == {"a.jpg": 2, "b.jpg": 3, "c.jpg": 4}


def test_jsonl_with_boxes_and_integer_classes_kept(tmp_path):
    path = jsonl(tmp_path, [{"path": "x/1.jpg", "labels": [3, 7], "target": 2.5, "boxes": [[1, 2, 30, 40, 7]]},
                            {"path": "x/2.jpg", "labels": [], "target": -1, "boxes": []},
                            {"path": "x/3.jpg", "labels": [0], "target": 0,
                             "boxes": [[0, 0, 5, 5, 0], [1.5, 2, 3, 4, 3]]}])
    table = read_labels_file(path)
    assert table.classes == [str(k) for k in range(8)] and table.unit == "line"
    assert table.fields == {"labels": {"max": 2}, "target": {"width": 1, "scalar": True}, "boxes": {"max": 2}}
    assert table.labels == [-1, -1, -1]                     # no label column
    assert table.targets.record(0) == {"labels": [3, 7], "target": 2.5, "boxes": [[1.0, 2.0, 30.0, 40.0, 7]]}
    assert table.targets.record(2)["boxes"] == [[0.0, 0.0, 5.0, 5.0, 0], [1.5, 2.0, 3.0, 4.0, 3]]


def test_label_and_box_classes_each_have_their_own_sorted_list(tmp_path):
    path = jsonl(tmp_path, [{"path": "a.jpg", "label": "zebra", "boxes": [[0, 0, 2, 2, "ant"]]},
                            {"path": "b.jpg", "label": "ant", "boxes": [[0, 0, 2, 2, "moth"], [0, 0, 1, 1, 7]]}])
    table = read_labels_file(path)
    assert table.class_lists == {"label": ["ant", "zebra"], "boxes": ["7", "ant", "moth"]}
    assert table.classes == ["ant", "zebra"] and table.labels == [1, 0]
    assert table.targets.record(1)["boxes"] == [[0.0, 0.0, 2.0, 2.0, 2], [0.0, 0.0, 1.0, 1.0, 0]]


def test_integer_classes_are_kept_per_field(tmp_path):
    path = jsonl(tmp_path, [{"path": "a.jpg", "label": 3, "labels": [0, 1]},
                            {"path": "b.jpg", "label": 0, "labels": [1]}])
    table = read_labels_file(path)
    assert table.class_lists == {"label": ["0", "1", "2", "3"], "labels": ["0", "1"]}
    assert table.labels == [3, 0] and table.targets.record(0)["labels"] == [0, 1]


def test_a_jsonl_file_is_known_by_content_too(tmp_path):
    path = write(tmp_path, "labels.txt", '{"path": "a.jpg", "label": 3}\n\n{"path": "b.jpg", "label": 1}\n')
    table = read_labels_file(path)
    assert table.unit == "line" and table.labels == [3, 1] and table.rows == {"a.jpg": 1, "b.jpg": 3}


def test_ids_as_a_target_are_kept_exactly(tmp_path):
    ids = [1_100_000, 3, 999_999, 16_777_216]
    table = read_labels_file(write(tmp_path, "l.csv", "path,target\n" + "".join(f"{i}.jpg,{v}\n"
                                                                                for i, v in enumerate(ids))))
    assert [table.targets.record(i)["target"] for i in range(4)] == ids
    assert table.classes == [] and "label" not in table.fields


# -- refused, with the file, the row and what to write ------------------------------------------

@pytest.mark.parametrize("name, content, expected", [
    # the cases
    ("l.csv", 'img.jpg,"1,3"\n', ["row 1: label '1,3' holds a ','", "path,labels", "img.jpg,1;3"]),
    ("l.csv", "a.jpg,2\nimg.jpg,1,3\n", ["row 2 has 3 columns", "path,label", "img.jpg,1;3"]),
    ("l.csv", "a.jpg,0.5\n", ["row 1: label '0.5' is a decimal number", "`target`"]),
    ("l.csv", "path,label\na.jpg,1\nb.jpg,2.0\n", ["row 3: label '2.0' is a decimal number",
                                                 "write 2 for that class", "`target`"]),
    ("l.csv", "a.jpg,1\nb.jpg,20000000\n", ["row 2: class 20000000 would make 20,000,001 classes", "`target`"]),
    ("l.jsonl", '{"path": "a.jpg", "label": 3.0}\n', ["line 1: label '3.0' is a decimal number", "write 3 for",
                                                      "key `target`"]),
    ("l.jsonl", '{"path": "a.jpg", "label": "1,3"}\n', ["line 1: label '1,3' holds a ','",
                                                        '"labels": ["1", "3"]']),
    # other malformed CSVs
    ("l.csv", "path,label\na.jpg,1,3\n", ["row 2 has 3 columns, but the header names 2", "path,labels"]),
    ("l.csv", "path,label,target\na.jpg,1\n", ["row 2 has no target"]),
    ("l.csv", "path,label,target\na.jpg,,1\n", ["row 2: label is empty"]),
    ("l.csv", "path,labels\na.jpg,cat;;dog\n", ["row 2: class in labels is empty"]),
    ("l.csv", "path,label\na.jpg,cat;dog\n", ["row 2: label 'cat;dog' holds a ';'", "path,labels"]),
    ("l.csv", "path,labels\na.jpg,\"cat,dog\"\n", ["row 2: class in labels 'cat,dog' holds a ','"]),
    ("l.csv", "path,label,colour\na.jpg,1,red\n", ["row 1: column 'colour'", "path, label, labels, target"]),
    ("l.csv", "path,label,class\na.jpg,1,2\n", ["row 1: the header names the label column twice"]),
    ("l.csv", "label,target\n1,2\n", ["row 1: the header has no path column"]),
    ("l.csv", "path\na.jpg\n", ["no column besides path"]),
    ("l.csv", "path,target\na.jpg,tall\n", ["row 2: target 'tall' is not a number"]),
    ("l.csv", "path,target\na.jpg,nan\n", ["row 2: target 'nan' is not finite"]),
    ("l.csv", "path,target\na.jpg,1;2\nb.jpg,3\n", ["row 3: target has 1 number(s), but row 2 has 2"]),
    ("l.csv", "path,target\na.jpg,123456789\n", ["row 2: target [123456789.0] does not survive float32"]),
    ("l.csv", "path,boxes\na.jpg,1\n", ["boxes need a JSON Lines file"]),
    ("l.csv", "a.jpg,-2\n", ["row 1: class -2: labels must be >= 0"]),
    # malformed JSON Lines
    ("l.jsonl", '{"path": "a.jpg", "label": true}\n', ["line 1: label True is not a class"]),
    ("l.jsonl", '{"path": "a.jpg", "label": 1}\n{"path": "b.jpg"}\n', ["line 2 has the keys path, but line 1"]),
    ("l.jsonl", '{"path": "a.jpg", "kind": 1}\n', ["line 1: key 'kind' is not one of"]),
    ("l.jsonl", '{"path": "a.jpg", "label": 1}\n[1, 2]\n', ["line 2 is a JSON list, not an object"]),
    ("l.jsonl", '{"path": "a.jpg", "label": 1\n', ["line 1 is not valid JSON"]),
    ("l.jsonl", '{"path": 7, "label": 1}\n', ["line 1: path 7 is not a file name"]),
    ("l.jsonl", '{"path": "a.jpg", "labels": "cat"}\n', ["line 1: labels 'cat' is not a list"]),
    ("l.jsonl", '{"path": "a.jpg", "target": "0.5"}\n', ["line 1: target '0.5' is not a number"]),
    ("l.jsonl", '{"path": "a.jpg", "target": [1]}\n{"path": "b.jpg", "target": 2}\n',
     ["line 2: target is a number, but on line 1 a list"]),
    ("l.jsonl", '{"path": "a.jpg", "boxes": [[1, 2, 3, 4]]}\n', ["line 1: box 0 [1, 2, 3, 4] is not [x0, y0"]),
    ("l.jsonl", '{"path": "a.jpg", "boxes": [[0, 0, 1, 1, 0], [5, 2, 3, 4, 0]]}\n',
     ["line 1: box 1 [5, 2, 3, 4, 0]: needs x0 < x1 and y0 < y1"]),
    ("l.jsonl", '{"path": "a.jpg", "boxes": [[0, 0, 1, 1, 0.5]]}\n', ["line 1: box 0's class '0.5'"]),
    ("l.jsonl", '{"path": "a.jpg", "label": 1}\n{"path": "a.jpg", "label": 2}\n',
     ["line 2 lists a.jpg again (first at line 1)"]),
])
def test_malformed_labels_files_are_refused_with_the_row(tmp_path, name, content, expected):
    path = write(tmp_path, name, content)
    with pytest.raises(FeedlineError) as err:
        read_labels_file(path)
    text = str(err.value)
    assert text.startswith(path + ": ")
    for part in expected:
        assert part in text, text


# -- warned about -------------------------------------------------------------------------------

def test_labels_like_unique_ids_warn_and_say_how_to_keep_them(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    sparse = write(tmp_path, "sparse.csv", "".join(f"{i}.jpg,{v}\n" for i, v in
                                                   enumerate([1_100_000, 5, 73_001, 5, 640_210])))
    table = read_labels_file(sparse)
    assert len(table.classes) == 1_100_001 and table.labels[0] == 1_100_000    # packed as asked
    assert "look like unique ids" in caplog.text and "integers up to 1,100,000 of which 4 are used" in caplog.text
    assert "to keep them as numbers, name the column `target` (header path,target)" in caplog.text
    caplog.clear()
    many = jsonl(tmp_path, [{"path": f"{i}.jpg", "label": f"user-{i // 2}"} for i in range(300)])
    read_labels_file(many)
    assert "150 classes for 300 images" in caplog.text and 'name the key "target"' in caplog.text
    caplog.clear()
    classes = jsonl(tmp_path, [{"path": f"{i}.jpg", "label": f"c{i % 20}"} for i in range(300)], "ok.jsonl")
    read_labels_file(classes)
    assert caplog.text == ""


def test_labels_of_one_class_each_warn(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    read_labels_file(write(tmp_path, "l.csv", "path,labels\na.jpg,1\nb.jpg,2\n"))
    assert "every row of labels holds one class" in caplog.text and "`label`" in caplog.text


# -- against a real folder: unlisted images and missing files, as with a CSV -----------------------

def test_a_jsonl_file_reports_unlisted_and_missing_files(tmp_path, caplog):
    from feedline.sample import make_photo_folder
    src = str(tmp_path / "src")
    make_photo_folder(src, n=4, classes=2, seed=0, sizes=[(64, 48)])
    rels = sorted(os.path.relpath(os.path.join(d, f), src) for d, _, fs in os.walk(src) for f in fs)
    path = jsonl(tmp_path, [{"path": r, "target": [k, -k]} for k, r in enumerate(rels[:3])]
                 + [{"path": "gone.jpg", "target": [9, 9]}])
    caplog.set_level(logging.WARNING)
    scan = scan_folder(src, path)
    assert scan.paths == rels[:3] and scan.fields == {"target": {"width": 2, "scalar": False}}
    assert [scan.targets.record(i)["target"] for i in range(3)] == [[0, 0], [1, -1], [2, -2]]
    assert {(p.path, p.reason) for p in scan.problems} == {("gone.jpg", "missing"),
                                                           (rels[3], "not-in-labels-jsonl")}
    assert "listed in l.jsonl (line 4)" in next(p.detail for p in scan.problems if p.path == "gone.jpg")
