"""The registry of field kinds (`feedline.fields`): what it derives from the kinds, the specs
and class lists it checks, and the one place that knows the kinds by name."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from feedline.fields import (FIELD_COLUMNS, FIELD_NAMES, GEOMETRIC, KINDS, MIXING, TARGET_DTYPES, FieldsError,
                             check_class_lists, check_fields, class_fields, refusing)

ROOT = Path(__file__).resolve().parents[1]


def test_the_registry_lists_each_kind_with_its_columns_in_stored_order():
    assert FIELD_NAMES == ("label", "labels", "target", "boxes", "keypoints", "mask")
    assert FIELD_COLUMNS["mask"] == ("mask_checksums",) and TARGET_DTYPES["mask_checksums"] == "<u8"
    assert FIELD_COLUMNS["boxes"] == ("box_offsets", "box_coords", "box_classes")
    assert FIELD_COLUMNS["keypoints"] == ("keypoints",) and TARGET_DTYPES["keypoints"] == "<f4"
    assert class_fields({"keypoints": {}, "boxes": {}, "target": {}, "label": {}}) == ["label", "boxes"]
    assert refusing({"label": {}, "boxes": {}, "keypoints": {}}, GEOMETRIC) == ["boxes", "keypoints"]
    assert refusing(("labels", "target"), MIXING) == []
    assert refusing({"boxes": {}, "mask": {}}, GEOMETRIC) == ["boxes"] and refusing(("mask",), MIXING) == []


@pytest.mark.parametrize("fields, message", [
    ({}, "expected a non-empty object"), ({"colour": {}}, "expected a non-empty object"),
    ({"boxes": {}}, "field 'boxes': spec {} lacks max"), ({"boxes": {"max": True}}, "lacks max"),
    ({"keypoints": {"count": "3"}}, "lacks count"), ({"target": {"width": 2, "scalar": True}}, "not a valid width"),
])
def test_bad_specs_are_refused_by_their_kind(fields, message):
    with pytest.raises(FieldsError, match=message):
        check_fields(fields)


def test_specs_come_back_in_stored_order_without_extra_keys():
    assert list(check_fields({"keypoints": {"count": 2, "x": 1}, "label": {}})) == ["label", "keypoints"]
    assert check_fields({"keypoints": {"count": 2, "x": 1}})["keypoints"] == {"count": 2}


def test_class_lists_need_one_list_of_names_per_field_with_classes():
    fields = {"label": {}, "boxes": {"max": 1}, "target": {"width": 1, "scalar": True}}
    assert check_class_lists({"label": ["a"], "boxes": ["b", "c"]}, fields) == {"label": ["a"], "boxes": ["b", "c"]}
    for bad in ({"label": ["a"]}, {"label": ["a"], "boxes": [1]}, {"label": ["a"], "boxes": [], "target": []}, []):
        with pytest.raises(FieldsError, match="one list of names for each of label, boxes"):
            check_class_lists(bad, fields)


def kind_checks(path: Path) -> list[str]:
    """Where a module compares a value with a kind's name: ``"boxes" in fields``, ``name == "label"``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn, ast.Eq, ast.NotEq))
                                                 for op in node.ops):
            for side in (node.left, *node.comparators):
                names = [side] if isinstance(side, ast.Constant) else \
                    list(side.elts) if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else []
                found += [f"{path.relative_to(ROOT)}:{node.lineno} {n.value!r}" for n in names
                          if isinstance(n, ast.Constant) and n.value in KINDS]
    return found


# Batch transforms read the delivered dict's keys (a mixer mixes "label" or "labels"), and
# `feedline show` captions them: those are batch keys, not field kinds' knowledge. WebDataset's
# KEY.cls is a label by that format's own convention.
BATCH_KEYS = ("feedline/transforms/runner.py", "feedline/sources/transforming.py", "feedline/dataset/show.py",
              "converters/webdataset.py")


def test_only_the_field_kinds_know_the_kinds_by_name():
    found = [c for package in ("feedline", "converters") for path in sorted((ROOT / package).rglob("*.py"))
             if "fields" not in path.relative_to(ROOT).parts and path.relative_to(ROOT).as_posix() not in BATCH_KEYS
             for c in kind_checks(path)]
    assert found == []


def test_the_kind_checker_sees_each_form(tmp_path):
    (tmp_path / "m.py").write_text('a = "boxes" in fields\nb = name == "label"\nc = k in ("labels", "x")\n'
                                   'd = "colour" in fields\n')
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert kind_checks(tmp_path / "m.py") == ["m.py:1 'boxes'", "m.py:2 'label'", "m.py:3 'labels'"]
    finally:
        ROOT = saved
