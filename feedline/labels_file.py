"""A labels file (CSV or JSON Lines) read into the fields of a data set.

Columns: ``path``; ``label`` (one class: a name or an integer); ``labels`` (several classes);
``target`` (a number, or a fixed-length list of numbers); ``boxes`` (JSON Lines: a list of
[x0, y0, x1, y1, class] in source pixels). Classes of ``label``, ``labels`` and boxes share one
list: integers are kept as they are (7 stays 7; the classes are named "0" to the largest),
otherwise the names are numbered in sorted order. Anything that would be misread (a comma in
a label, a row with extra cells, a label with a fraction) is refused with the file, the row
and what to write instead; labels that look like unique ids are packed with a warning that
says how to keep them as numbers.
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import FeedlineError
from .labels_csv import SEVERAL, is_int, read_csv
from .labels_jsonl import read_jsonl

if TYPE_CHECKING:
    from .targets import TargetColumns

log = logging.getLogger(__name__)

_DECIMAL = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][+-]?\d+)")
MAX_CLASSES = 1 << 24        # integer labels above this are ids, not classes: refused
SPARSE_ABOVE = 100_000       # integer labels above this, using few of the numbers below: ids
_EXACT_FLOAT32 = 1 << 24     # integers beyond this do not survive float32


@dataclass
class LabelsTable:
    """What a labels file says, row by row in file order."""

    source: str
    unit: str                     # "row" (CSV) or "line" (JSON Lines)
    fields: dict[str, dict]       # the fields present, with their specs (see `feedline.targets`)
    classes: list[str]
    rows: dict[str, int]          # relative path -> row number
    position: dict[str, int]      # relative path -> place in file order
    labels: list[int]             # the label of each row; -1 without a label column
    targets: TargetColumns | None  # the other fields (labels, target, boxes) in file order; None if none


def is_jsonl(path: str) -> bool:
    if path.lower().endswith((".jsonl", ".ndjson")):
        return True
    try:
        with open(path, "rb") as fh:
            return fh.read(64).lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"{"
    except OSError:
        return False


class _Parser:
    def __init__(self, source: str, unit: str):
        self.source, self.unit = source, unit
        self.key = "column" if unit == "row" else "key"
        self.path = ""   # of the row being read, for examples in messages

    def fail(self, line: int, text: str) -> FeedlineError:
        return FeedlineError(f"{self.source}: {self.unit} {line}: {text}")

    def token(self, value, line: int, what: str) -> str:
        """A class as text ("7" or "cat"), or a refusal that says what to write."""
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise self.fail(line, f"{what} {value!r} is not a class: write a name or an integer")
        if isinstance(value, float):
            value = repr(value)
        text = str(value).strip()
        if not text:
            raise self.fail(line, f"{what} is empty: write a class (a name or an integer)")
        if "," in text or (";" in text and what == "label"):
            parts = [p.strip() for p in text.replace(";", ",").split(",")]
            advice = (SEVERAL.format(example=f"{self.path},{';'.join(parts)}") if self.unit == "row" else
                      "for several classes per image write \"labels\": a list, e.g. \"labels\": "
                      f"{json.dumps(parts)}; for several numbers, \"target\": a list of numbers")
            raise self.fail(line, f"{what} {text!r} holds a '{',' if ',' in text else ';'}', so it would be one "
                                  f"class of that name: {advice}")
        if _DECIMAL.fullmatch(text):
            whole = float(text).is_integer() and abs(float(text)) < MAX_CLASSES
            hint = f"write {int(float(text))} for that class, or " if whole else ""
            raise self.fail(line, f"{what} {text!r} is a decimal number, not a class (a name or an integer): "
                                  f"{hint}for a number to learn, name the {self.key} `target`")
        return text

    def numbers(self, value, line: int) -> list[float]:
        if self.unit == "row":
            cells = [c.strip() for c in value.split(";")]
            try:
                out = [float(c) for c in cells]
            except ValueError:
                raise self.fail(line, f"target {value!r} is not a number, or numbers separated by ';'") from None
        else:
            items = value if isinstance(value, list) else [value]
            if not items or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in items):
                raise self.fail(line, f"target {value!r} is not a number or a list of numbers")
            out = [float(v) for v in items]
        if not all(math.isfinite(v) for v in out):
            raise self.fail(line, f"target {value!r} is not finite: write a number")
        return out

    def box(self, value, line: int, k: int) -> tuple[list[float], str]:
        if (not isinstance(value, list) or len(value) != 5
                or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value[:4])):
            raise self.fail(line, f"box {k} {value!r} is not [x0, y0, x1, y1, class] (4 numbers in source "
                                  "pixels and a class)")
        x0, y0, x1, y1 = (float(v) for v in value[:4])
        if not all(math.isfinite(v) for v in (x0, y0, x1, y1)) or not (x1 > x0 and y1 > y0):
            raise self.fail(line, f"box {k} {value!r}: needs x0 < x1 and y0 < y1 (corners in source pixels)")
        return [x0, y0, x1, y1], self.token(value[4], line, f"box {k}'s class")


def read_labels_file(path: str) -> LabelsTable:
    """Read and check a labels file; FeedlineError naming the file and row for anything wrong."""
    unit = "line" if is_jsonl(path) else "row"
    columns, rows = read_jsonl(path) if unit == "line" else read_csv(path)
    parser = _Parser(path, unit)
    fields = columns[1:]
    if not fields:
        raise FeedlineError(f"{path}: no column besides path: add label, labels, target or boxes")
    if "boxes" in fields and unit == "row":
        raise FeedlineError(f"{path}: boxes need a JSON Lines file (FILE.jsonl), one object per line: "
                            "{\"path\": \"a/1.jpg\", \"boxes\": [[x0, y0, x1, y1, class], ...]}")
    seen: dict[str, int] = {}
    for line, rel, _ in rows:
        if rel in seen:
            raise FeedlineError(f"{path}: {unit} {line} lists {rel} again (first at {unit} {seen[rel]}); each "
                                f"file may have one {unit}")
        seen[rel] = line
    parsed = [_parse_row(parser, line, rel, values) for line, rel, values in rows]
    classes, index = _classes(parser, [(line, p) for (line, _, _), p in zip(rows, parsed, strict=True)])
    table = LabelsTable(source=path, unit=unit, fields={}, classes=classes, rows=seen,
                        position={rel: k for k, (_, rel, _) in enumerate(rows)},
                        labels=[index[p["label"]] if "label" in p else -1 for p in parsed],
                        targets=_columns(parser, rows, parsed, index))
    table.fields = ({"label": {}} if "label" in fields else {}) | (table.targets.fields if table.targets else {})
    _warn_ids(table, parsed)
    return table


def _parse_row(parser: _Parser, line: int, rel: str, values: dict) -> dict:
    out = {}
    parser.path = rel
    if "label" in values:
        out["label"] = parser.token(values["label"], line, "label")
    if "labels" in values:
        raw = values["labels"]
        if parser.unit == "row":
            items = [c.strip() for c in raw.split(";")] if raw.strip() else []
        elif isinstance(raw, list):
            items = raw
        else:
            raise parser.fail(line, f"labels {raw!r} is not a list of classes, e.g. [\"cat\", \"dog\"] or [1, 3]")
        out["labels"] = list(dict.fromkeys(parser.token(v, line, "class in labels") for v in items))
    if "target" in values:
        out["target"] = parser.numbers(values["target"], line)
        out["listed"] = parser.unit == "line" and isinstance(values["target"], list)
    if "boxes" in values:
        if not isinstance(values["boxes"], list):
            raise parser.fail(line, f"boxes {values['boxes']!r} is not a list of [x0, y0, x1, y1, class]")
        out["boxes"] = [parser.box(b, line, k) for k, b in enumerate(values["boxes"])]
    return out


def _classes(parser: _Parser, parsed: list[tuple[int, dict]]) -> tuple[list[str], dict[str, int]]:
    """The class list and each class token's index: integers as they are, else sorted names."""
    where: dict[str, int] = {}
    for line, p in parsed:
        for token in ([p["label"]] if "label" in p else []) + p.get("labels", []) + [c for _, c in p.get("boxes", [])]:
            where.setdefault(token, line)
    if where and all(is_int(t) for t in where):
        ints = {t: int(t) for t in where}
        low, high = min(ints, key=ints.get), max(ints, key=ints.get)
        if ints[low] < 0:
            raise parser.fail(where[low], f"class {low}: labels must be >= 0")
        if ints[high] >= MAX_CLASSES:
            raise parser.fail(where[high], f"class {high} would make {ints[high] + 1:,} classes: numbers this "
                                           f"large are ids, not classes; keep them as numbers in a `target` "
                                           f"{parser.key}, or write class names")
        return [str(i) for i in range(max(ints.values()) + 1)], ints
    classes = sorted(where)
    return classes, {name: i for i, name in enumerate(classes)}


def _columns(parser: _Parser, rows, parsed: list[dict], index: dict[str, int]) -> TargetColumns | None:
    """The fields beyond label as columns; None for a label-only file, which so needs no numpy
    (a JPEG pack with a path,label file imports none)."""
    first = parsed[0]
    if not {"labels", "target", "boxes"} & first.keys():
        return None
    import numpy as np

    from .targets import TargetColumns
    n = len(parsed)
    fields, arrays = {}, {}
    if "labels" in first:
        counts = [len(p["labels"]) for p in parsed]
        fields["labels"] = {"max": max(counts)}
        arrays["label_set_offsets"] = np.cumsum([0, *counts])
        arrays["label_set_classes"] = [index[t] for p in parsed for t in p["labels"]]
    if "target" in first:
        width, listed = len(first["target"]), first["listed"]
        for (line, _, _), p in zip(rows, parsed, strict=True):
            if len(p["target"]) != width:
                raise parser.fail(line, f"target has {len(p['target'])} number(s), but {parser.unit} {rows[0][0]} "
                                        f"has {width}: every {parser.unit} needs the same number")
            if p["listed"] != listed:
                raise parser.fail(line, f"target is {'a list' if p['listed'] else 'a number'}, but on line "
                                        f"{rows[0][0]} {'a list' if listed else 'a number'}: write them alike")
        scalar = width == 1 and not listed
        values = np.array([p["target"] for p in parsed], dtype=np.float64).reshape(n, width)
        inexact = np.flatnonzero(np.any((np.abs(values) > _EXACT_FLOAT32) & (values.astype(np.float32) != values),
                                        axis=1))
        if len(inexact):
            raise parser.fail(rows[inexact[0]][0], f"target {parsed[inexact[0]]['target']} does not survive "
                                                   f"float32 (the stored type), which holds integers up to "
                                                   f"{_EXACT_FLOAT32:,} exactly: subtract an offset or scale it")
        fields["target"] = {"width": width, "scalar": scalar}
        arrays["targets"] = values
    if "boxes" in first:
        counts = [len(p["boxes"]) for p in parsed]
        fields["boxes"] = {"max": max(counts)}
        arrays["box_offsets"] = np.cumsum([0, *counts])
        arrays["box_coords"] = np.array([c for p in parsed for c, _ in p["boxes"]], dtype=np.float64).reshape(-1)
        arrays["box_classes"] = [index[k] for p in parsed for _, k in p["boxes"]]
    return TargetColumns(fields, arrays, n)


def _warn_ids(table: LabelsTable, parsed: list[dict]) -> None:
    """Warn about labels that look like one id per image, and `labels` of one class each."""
    used = {t for p in parsed for t in ([p["label"]] if "label" in p else []) + p.get("labels", [])}
    n, k = len(parsed), len(used)
    name = os.path.basename(table.source)
    target = "the column `target` (header path,target)" if table.unit == "row" else "the key \"target\""
    ints = [int(t) for t in used if is_int(t)]
    sparse = len(ints) == k > 0 and max(ints) > SPARSE_ABOVE and k < (max(ints) + 1) / 2
    if (k > n / 10 and k >= 100) or sparse:
        why = (f"integers up to {max(ints):,} of which {k:,} are used" if sparse else
               f"{k:,} classes for {n:,} images")
        log.warning("%s: the labels look like unique ids, not classes (%s): packed as classes; to keep them "
                    "as numbers, name %s", name, why, target)
    if "labels" in table.fields and n > 1 and all(len(p["labels"]) == 1 for p in parsed):
        log.warning("%s: every %s of labels holds one class: packed as multi-label; if each image has exactly "
                    "one class, name the column `label`", name, table.unit)
