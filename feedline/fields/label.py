"""``label``: one class per record, int64; the classic ``labels`` column every store has
(-1 in each record of a store without this field). In a batch: int64 (B,)."""
from __future__ import annotations

from .base import Field, FieldsError, class_range_problems
from .lazy_numpy import np


class Label(Field):
    name = "label"
    columns = {"labels": "<i8"}
    has_classes = True
    names_images = True
    example = '"label": "cat"'
    header_words = ("class", "class_name", "class name", "classname", "category", "y")
    task = "classify"

    @classmethod
    def parse(cls, parser, value, line: int) -> str:
        return parser.token(value, line, "label", single=True)

    @classmethod
    def tokens(cls, parsed: str) -> list[str]:
        return [parsed]

    @classmethod
    def build(cls, parser, lines, parsed, index):
        return {}, {"labels": [index[p] for p in parsed]}   # a list: a label-only file needs no numpy

    def check_columns(self, a, n):
        if len(a["labels"]) != n:
            raise FieldsError(f"labels: {len(a['labels'])} values for {n} records")

    def take(self, a, idx, n):
        return {"labels": a["labels"][idx]}

    def record(self, a, i, n):
        return int(a["labels"][i])

    def batch_layout(self, b):
        return {"label": ((b,), "int64")}

    def fill(self, a, idx, out, n, geometry):
        out["label"][:len(idx)] = a["labels"][idx]

    def stats(self, a, n):
        return {"classes_used": int(len(np.unique(a["labels"])))}

    def problems(self, a, n, sizes):
        return class_range_problems(a["labels"], np.arange(n), self.num_classes, "label")

    def class_occurrences(self, a, n):
        return np.arange(n), a["labels"]


KIND = Label   # what the registry lists
