"""A labels file (CSV or JSON Lines) read into the fields of a data set.

Columns: ``path`` and one per field kind (`feedline.fields`): ``label`` (one class: a name or
an integer), ``labels`` (several classes), ``target`` (a number, or a fixed-length list of
numbers), ``boxes`` (JSON Lines: a list of [x0, y0, x1, y1, class] in source pixels),
``keypoints`` (JSON Lines: a list of [x, y, visible]), ``mask`` (the path of the image's mask,
a single-channel PNG, relative to the image folder). Each field with classes has its own
class list: integers are kept as they are (7 stays 7; the classes are named "0" to the
largest), otherwise the names are numbered in sorted order. Anything that would be misread (a
comma in a label, a row with extra cells, a label with a fraction) is refused with the file,
the row and what to write instead; labels that look like unique ids are packed with a warning
that says how to keep them as numbers.
"""
from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.errors import FeedlineError
from ..fields import KINDS, class_fields
from .labels_csv import SEVERAL, is_int, read_csv
from .labels_jsonl import read_jsonl

if TYPE_CHECKING:
    from .targets import TargetColumns

log = logging.getLogger(__name__)

_DECIMAL = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][+-]?\d+)")
CLASSIC_COLUMN = "labels"    # the format's labels column: every store has it
MAX_CLASSES = 1 << 24        # integer labels above this are ids, not classes: refused
SPARSE_ABOVE = 100_000       # integer labels above this, using few of the numbers below: ids


@dataclass
class LabelsTable:
    """What a labels file says, row by row in file order."""

    source: str
    unit: str                     # "row" (CSV) or "line" (JSON Lines)
    fields: dict[str, dict]       # the fields present, with their specs (see `feedline.fields`)
    class_lists: dict[str, list[str]]   # each field with classes: its own list
    classes: list[str]            # the label's list, or else the first field's (what one-list tools show)
    rows: dict[str, int]          # relative path -> row number
    position: dict[str, int]      # relative path -> place in file order
    labels: list[int]             # the label of each row; -1 without a label column
    targets: TargetColumns | None  # the fields beyond label in file order; None if none
    masks: list[str] | None = None  # each row's mask file (relative to the image folder); None without masks


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
        self.name = os.path.basename(source)
        self.key = "column" if unit == "row" else "key"
        self.path = ""   # of the row being read, for examples in messages

    def fail(self, line: int, text: str) -> FeedlineError:
        return FeedlineError(f"{self.source}: {self.unit} {line}: {text}")

    def token(self, value, line: int, what: str, single: bool = False) -> str:
        """A class as text ("7" or "cat"), or a refusal that says what to write (``single``: a
        cell of one class, where a ';' means several were meant)."""
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise self.fail(line, f"{what} {value!r} is not a class: write a name or an integer")
        if isinstance(value, float):
            value = repr(value)
        text = str(value).strip()
        if not text:
            raise self.fail(line, f"{what} is empty: write a class (a name or an integer)")
        if "," in text or (";" in text and single):
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


def read_labels_file(path: str) -> LabelsTable:
    """Read and check a labels file; FeedlineError naming the file and row for anything wrong."""
    unit = "line" if is_jsonl(path) else "row"
    columns, rows = read_jsonl(path) if unit == "line" else read_csv(path)
    parser = _Parser(path, unit)
    fields = columns[1:]
    if not fields:
        raise FeedlineError(f"{path}: no column besides path: add {', '.join(KINDS)}")
    for name in fields:
        if unit == "row" and not KINDS[name].csv:
            raise FeedlineError(f"{path}: {name} need a JSON Lines file (FILE.jsonl), one object per line: "
                                f"{{\"path\": \"a/1.jpg\", {KINDS[name].example}}}")
    seen: dict[str, int] = {}
    for line, rel, _ in rows:
        if rel in seen:
            raise FeedlineError(f"{path}: {unit} {line} lists {rel} again (first at {unit} {seen[rel]}); each "
                                f"file may have one {unit}")
        seen[rel] = line
    lines = [line for line, _, _ in rows]
    parsed = {name: [] for name in fields}
    for line, rel, values in rows:
        parser.path = rel
        for name in fields:
            parsed[name].append(KINDS[name].parse(parser, values[name], line))
    class_lists, index = {}, {}
    for name in class_fields(fields):
        class_lists[name], index[name] = _classes(parser, lines, [KINDS[name].tokens(p) for p in parsed[name]])
    built = {name: KINDS[name].build(parser, lines, parsed[name], index.get(name, {})) for name in fields}
    specs = {name: built[name][0] for name in KINDS if name in built}   # in stored order
    labels = _classic_labels(built, len(rows))   # takes the label field out of ``built``
    table = LabelsTable(source=path, unit=unit, fields=specs, class_lists=class_lists,
                        classes=next(iter(class_lists.values()), []), rows=seen,
                        position={rel: k for k, (_, rel, _) in enumerate(rows)},
                        labels=labels, targets=_columns(built, class_lists, len(rows)),
                        masks=next((parsed[name] for name in fields if KINDS[name].files), None))
    _warn_ids(table, parsed)
    return table


def _classic_labels(built: dict[str, tuple[dict, dict]], n: int) -> list[int]:
    """The store's own ``labels`` column (the format's, in every store), taken out of ``built``
    with the field that fills it; -1 for each row when no field does."""
    for name, (_, columns) in list(built.items()):
        if CLASSIC_COLUMN in columns:
            del built[name]
            return list(columns[CLASSIC_COLUMN])
    return [-1] * n


def _classes(parser: _Parser, lines: list[int], tokens: list[list[str]]) -> tuple[list[str], dict[str, int]]:
    """One field's class list and each class token's index: integers as they are, else sorted names."""
    where: dict[str, int] = {}
    for line, named in zip(lines, tokens, strict=True):
        for token in named:
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


def _columns(built: dict[str, tuple[dict, dict]], class_lists: dict, n: int) -> TargetColumns | None:
    """The fields beyond label as columns; None for a label-only file, which so needs no numpy
    (a JPEG pack with a path,label file imports none)."""
    if not built:
        return None
    from .targets import TargetColumns
    fields = {name: spec for name, (spec, _) in built.items()}
    arrays = {column: values for _, columns in built.values() for column, values in columns.items()}
    return TargetColumns(fields, arrays, n, class_lists)


def _warn_ids(table: LabelsTable, parsed: dict[str, list]) -> None:
    """Warn about classes of whole images that look like one id per image."""
    n = len(table.position)
    target = "the column `target` (header path,target)" if table.unit == "row" else "the key \"target\""
    for name, classes in table.class_lists.items():
        if not KINDS[name].names_images:
            continue
        used = {t for p in parsed[name] for t in KINDS[name].tokens(p)}
        k = len(used)
        ints = [int(t) for t in used if is_int(t)]
        sparse = len(ints) == k > 0 and max(ints) > SPARSE_ABOVE and k < (max(ints) + 1) / 2
        if (k > n / 10 and k >= 100) or sparse:
            why = (f"integers up to {max(ints):,} of which {k:,} are used" if sparse else
                   f"{k:,} classes for {n:,} images")
            log.warning("%s: the %s look like unique ids, not classes (%s): packed as classes; to keep them "
                        "as numbers, name %s", os.path.basename(table.source), name, why, target)
