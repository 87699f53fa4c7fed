"""``labels``: several classes per record, a compact list: ``label_set_offsets`` int64[n + 1]
and ``label_set_classes`` int32[...]; spec ``{"max": most classes of one record}``. In a
batch: float32 (B, C) multi-hot, C this field's classes."""
from __future__ import annotations

import logging

from .base import Field, check_offsets, class_range_problems, owners, segments, spread
from .lazy_numpy import np

log = logging.getLogger(__name__)


class Labels(Field):
    name = "labels"
    columns = {"label_set_offsets": "<i8", "label_set_classes": "<i4"}
    spec_keys = {"max": int}
    joined_keys = ("max",)
    has_classes = True
    names_images = True
    example = '"labels": ["cat", "dog"]'
    header_words = ("classes",)
    task = "multilabel"

    @classmethod
    def parse(cls, parser, value, line: int) -> list[str]:
        if parser.unit == "row":
            items = [c.strip() for c in value.split(";")] if value.strip() else []
        elif isinstance(value, list):
            items = value
        else:
            raise parser.fail(line, f"labels {value!r} is not a list of classes, e.g. [\"cat\", \"dog\"] or [1, 3]")
        return list(dict.fromkeys(parser.token(v, line, "class in labels") for v in items))

    @classmethod
    def tokens(cls, parsed: list[str]) -> list[str]:
        return parsed

    @classmethod
    def build(cls, parser, lines, parsed, index):
        counts = [len(p) for p in parsed]
        if len(parsed) > 1 and all(c == 1 for c in counts):
            log.warning("%s: every %s of labels holds one class: packed as multi-label; if each image has "
                        "exactly one class, name the column `label`", parser.name, parser.unit)
        return {"max": max(counts)}, {"label_set_offsets": np.cumsum([0, *counts]),
                                      "label_set_classes": [index[t] for p in parsed for t in p]}

    def check_columns(self, a, n):
        check_offsets(self.name, "label_set_offsets", a["label_set_offsets"], len(a["label_set_classes"]), n,
                      self.spec["max"])

    def take(self, a, idx, n):
        pos, offsets = segments(a["label_set_offsets"], idx)
        return {"label_set_offsets": offsets, "label_set_classes": a["label_set_classes"][pos]}

    def record(self, a, i, n):
        off = a["label_set_offsets"]
        return a["label_set_classes"][off[i]:off[i + 1]].tolist()

    def batch_layout(self, b):
        return {"labels": ((b, self.num_classes), "float32")}

    def fill(self, a, idx, out, n, geometry):
        pos, offsets = segments(a["label_set_offsets"], idx)
        hot = out["labels"][:len(idx)]
        hot[...] = 0
        hot[np.repeat(np.arange(len(idx)), np.diff(offsets)), a["label_set_classes"][pos]] = 1

    def stats(self, a, n):
        return {"per_image": spread(np.diff(a["label_set_offsets"])),
                "classes_used": int(len(np.unique(a["label_set_classes"])))}

    @classmethod
    def describe(cls, stats):
        p = stats["per_image"]
        return f"labels ({p['min']}-{p['max']} per image, mean {p['mean']:.2f})"

    def problems(self, a, n, sizes):
        return class_range_problems(a["label_set_classes"], owners(a["label_set_offsets"], n), self.num_classes,
                                    "labels: class")

    def class_occurrences(self, a, n):
        return owners(a["label_set_offsets"], n), a["label_set_classes"]


KIND = Labels   # what the registry lists
