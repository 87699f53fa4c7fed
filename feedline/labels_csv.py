"""Labels from a CSV of (relative path, label) rows, checked against the folder.

A header row is recognized by its words (``path,label``, ``relative path,label``,
``file,class``, ...) or because its label is not an integer while every other row's
is. Integer labels are kept as they are (7 stays 7; the classes are named "0" to the
largest label); other labels are class names, numbered in sorted order. Images in the
folder that the CSV does not list, and rows whose file does not exist, are reported
by the scan (`feedline.scan`), never silently dropped.
"""
from __future__ import annotations

import csv
import os
import posixpath

from .errors import FeedlineError

_PATH_WORDS = {"path", "file", "filename", "file_name", "file name", "relative path", "relative_path",
               "relpath", "image", "image_path", "image path", "img", "name", "filepath", "file path"}
_LABEL_WORDS = {"label", "labels", "class", "class_name", "class name", "classname", "target", "category", "y"}


def _is_int(text: str) -> bool:
    return text.lstrip("-").isdigit()


def _read_rows(labels_csv: str) -> list[tuple[int, list[str]]]:
    """(line number, cells) of the rows that are not blank or comments."""
    try:
        with open(labels_csv, newline="", encoding="utf-8-sig") as fh:
            return [(n, [c.strip() for c in row]) for n, row in enumerate(csv.reader(fh), 1)
                    if row and any(c.strip() for c in row) and not row[0].lstrip().startswith("#")]
    except OSError as exc:
        raise FeedlineError(f"{labels_csv}: cannot read the labels file ({exc.strerror})") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise FeedlineError(f"{labels_csv}: not a UTF-8 CSV file ({exc})") from None


def _has_header(rows: list[tuple[int, list[str]]]) -> bool:
    first = rows[0][1]
    if first[0].lower() in _PATH_WORDS or (len(first) > 1 and first[1].lower() in _LABEL_WORDS):
        return True
    # "relative path,label" or any other words: a non-integer label above integer ones
    return (len(rows) > 1 and len(first) > 1 and not _is_int(first[1])
            and all(len(cells) > 1 and _is_int(cells[1]) for _, cells in rows[1:]))


def _relative(path: str, labels_csv: str, line: int) -> str:
    rel = posixpath.normpath(path.replace(os.sep, "/"))
    if rel.startswith("../") or rel == ".." or rel.startswith("/"):
        raise FeedlineError(f"{labels_csv}: row {line}: {path!r} is not a path inside the image folder; "
                            "write paths relative to it")
    return rel


def read_labels(labels_csv: str) -> tuple[dict[str, tuple[int, int]], list[str]]:
    """{relative path: (label, row)} and the class names, from the CSV."""
    rows = _read_rows(labels_csv)
    if rows and _has_header(rows):
        rows = rows[1:]
    if not rows:
        raise FeedlineError(f"{labels_csv}: no rows of (relative path, label)")
    entries: dict[str, tuple[str, int]] = {}
    for line, cells in rows:
        if len(cells) < 2 or not cells[0] or not cells[1]:
            raise FeedlineError(f"{labels_csv}: row {line} needs two columns: relative path, label")
        rel = _relative(cells[0], labels_csv, line)
        if rel in entries:
            raise FeedlineError(f"{labels_csv}: row {line} lists {rel} again (first at row {entries[rel][1]}); "
                                "each file may have one label")
        entries[rel] = (cells[1], line)
    names = [name for name, _ in entries.values()]
    if all(_is_int(n) for n in names):
        ints = {n: int(n) for n in set(names)}
        if min(ints.values()) < 0:
            raise FeedlineError(f"{labels_csv}: labels must be >= 0")
        classes = [str(i) for i in range(max(ints.values()) + 1)]
    else:
        classes = sorted(set(names))
        ints = {name: i for i, name in enumerate(classes)}
    return {rel: (ints[name], line) for rel, (name, line) in entries.items()}, classes
