"""The rows of a labels CSV: (row number, {column: text}), columns named by a header row.

Columns: ``path`` (required), then one per field kind (`feedline.fields`): ``label``,
``labels`` (classes separated by ';'), ``target`` (a number, or numbers separated by ';');
`labels_file` gives the values their meaning (and refuses the kinds that need JSON Lines). A
header row is recognized by its words (``path,label``, ``relative path,label``, ``file,class``,
``image,labels``, ...) or, in a two-column file, because its label is not an integer while
every other row's is. A file without a header is the classic ``path,label``: exactly two
columns, and a row with more is refused with what to write instead.
"""
from __future__ import annotations

import csv
import os
import posixpath

from ..core.errors import FeedlineError
from ..fields import KINDS

_PATH_WORDS = {"path", "file", "filename", "file_name", "file name", "relative path", "relative_path",
               "relpath", "image", "image_path", "image path", "img", "name", "filepath", "file path"}
COLUMN_WORDS = {**{w: "path" for w in _PATH_WORDS},   # a header's words -> the column (each kind's own words)
                **{w: name for name, kind in KINDS.items() for w in (name, *kind.header_words)}}
COLUMNS = ("path", *KINDS)   # path, then a column per field kind
HEADERLESS = ["path", "label"]   # the columns of a file without a header row
SEVERAL = ("for several classes per image write a header row `path,labels` and separate the classes "
           "with ';' ({example}); for several numbers per image, `path,target` the same way")


def is_int(text: str) -> bool:
    return text.lstrip("-").isdigit()


def _read_rows(labels_csv: str) -> list[tuple[int, list[str]]]:
    """(line number, cells) of the rows that are not blank or comments; empty cells at the
    end of a row (a spreadsheet's trailing commas) are dropped."""
    try:
        with open(labels_csv, newline="", encoding="utf-8-sig") as fh:
            rows = [(n, [c.strip() for c in row]) for n, row in enumerate(csv.reader(fh), 1)
                    if row and any(c.strip() for c in row) and not row[0].lstrip().startswith("#")]
    except OSError as exc:
        raise FeedlineError(f"{labels_csv}: cannot read the labels file ({exc.strerror})") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise FeedlineError(f"{labels_csv}: not a UTF-8 CSV file ({exc})") from None
    for _, cells in rows:
        while cells and not cells[-1]:
            cells.pop()
    return rows


def _header(rows: list[tuple[int, list[str]]], labels_csv: str) -> list[str] | None:
    """The canonical column names when the first row is a header, else None."""
    line, first = rows[0]
    words = [c.lower() for c in first]
    if words[0] in _PATH_WORDS or any(w in COLUMN_WORDS for w in words[1:]):
        unknown = [c for c, w in zip(first, words) if w not in COLUMN_WORDS]
        if unknown:
            raise FeedlineError(f"{labels_csv}: row {line}: column {unknown[0]!r} of the header is not one of "
                                f"{', '.join(COLUMNS)}; name the columns with those words")
        names = [COLUMN_WORDS[w] for w in words]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise FeedlineError(f"{labels_csv}: row {line}: the header names the {repeated[0]} column twice")
        if "path" not in names:
            raise FeedlineError(f"{labels_csv}: row {line}: the header has no path column; name it `path`")
        return names
    # "relative path,label" or any other words: a non-integer label above integer ones
    if (len(rows) > 1 and len(first) == 2 and not is_int(first[1])
            and all(len(cells) > 1 and is_int(cells[1]) for _, cells in rows[1:])):
        return list(HEADERLESS)
    return None


def relative_path(path: str, labels_file: str, where: str) -> str:
    rel = posixpath.normpath(path.replace(os.sep, "/"))
    if rel.startswith("../") or rel == ".." or rel.startswith("/"):
        raise FeedlineError(f"{labels_file}: {where}: {path!r} is not a path inside the image folder; "
                            "write paths relative to it")
    return rel


def read_csv(labels_csv: str) -> tuple[list[str], list[tuple[int, str, dict[str, str]]]]:
    """The column names (path first) and the rows: (line, relative path, {column: text})."""
    rows = _read_rows(labels_csv)
    names = _header(rows, labels_csv) if rows else None
    if names is not None:
        rows = rows[1:]
    if not rows:
        raise FeedlineError(f"{labels_csv}: no rows of (relative path, label)")
    out = []
    for line, cells in rows:
        if names is None and len(cells) < 2:
            raise FeedlineError(f"{labels_csv}: row {line} needs two columns: relative path, label")
        expected = names or HEADERLESS
        if len(cells) > len(expected):
            advice = SEVERAL.format(example=f"{cells[0]},{';'.join(cells[1:])}") if expected == HEADERLESS \
                else "give each row one cell per column, and quote a cell that holds a comma"
            what = "the header names" if names else "a labels file without a header row has"
            raise FeedlineError(f"{labels_csv}: row {line} has {len(cells)} columns, but {what} "
                                f"{len(expected)} ({','.join(expected)}): {advice}")
        if len(cells) < len(expected) or not cells[0]:
            missing = expected[len(cells)] if len(cells) < len(expected) else "path"
            raise FeedlineError(f"{labels_csv}: row {line} has no {missing} (columns: {','.join(expected)})")
        values = dict(zip(expected, cells, strict=True))
        out.append((line, relative_path(values.pop("path"), labels_csv, f"row {line}"), values))
    return (names or HEADERLESS), out
