"""The rows of a JSON Lines labels file: one object per line, the same keys on every line.

Keys: ``path`` (required), then one per field kind (`feedline.fields`): ``label`` (a class:
name or integer), ``labels`` (a list of classes), ``target`` (a number or a list of numbers),
``boxes`` (a list of [x0, y0, x1, y1, class] in source pixels), ``keypoints`` (a list of
[x, y, visible]). `labels_file` gives the values their meaning.
"""
from __future__ import annotations

import json

from ..core.errors import FeedlineError
from .labels_csv import COLUMNS, relative_path


def read_jsonl(labels_file: str) -> tuple[list[str], list[tuple[int, str, dict]]]:
    """The keys (path first) and the rows: (line, relative path, {key: JSON value})."""
    try:
        with open(labels_file, encoding="utf-8-sig") as fh:
            lines = [(n, text) for n, text in enumerate(fh, 1) if text.strip()]
    except OSError as exc:
        raise FeedlineError(f"{labels_file}: cannot read the labels file ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise FeedlineError(f"{labels_file}: not a UTF-8 JSON Lines file ({exc})") from None
    if not lines:
        raise FeedlineError(f"{labels_file}: no lines of {{\"path\": ..., \"label\": ...}}")
    keys: list[str] | None = None
    rows = []
    for line, text in lines:
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise FeedlineError(f"{labels_file}: line {line} is not valid JSON ({exc}); write one object "
                                "per line, e.g. {\"path\": \"a/1.jpg\", \"label\": 3}") from None
        if not isinstance(value, dict):
            raise FeedlineError(f"{labels_file}: line {line} is a JSON {type(value).__name__}, not an object "
                                "such as {\"path\": \"a/1.jpg\", \"label\": 3}")
        unknown = [k for k in value if k not in COLUMNS]
        if unknown:
            raise FeedlineError(f"{labels_file}: line {line}: key {unknown[0]!r} is not one of {', '.join(COLUMNS)}")
        if keys is None:
            keys = ["path", *(k for k in COLUMNS[1:] if k in value)]
        if set(value) != set(keys):
            raise FeedlineError(f"{labels_file}: line {line} has the keys {', '.join(sorted(value))}, but line "
                                f"{lines[0][0]} has {', '.join(sorted(keys))}: every line needs the same keys")
        path = value.pop("path")
        if not isinstance(path, str) or not path:
            raise FeedlineError(f"{labels_file}: line {line}: path {path!r} is not a file name (a string)")
        rows.append((line, relative_path(path, labels_file, f"line {line}"), value))
    return keys, rows
