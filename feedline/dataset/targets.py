"""A data set's targets as flat arrays, one layout for the scan, the stores and the batch.

A store holds some of the field kinds of `feedline.fields` (``fields``: name -> spec), each
with its stored columns, and each kind with classes has its own class list (``classes``:
name -> list). `TargetColumns` holds the columns of ``count`` records and asks each field
object for what concerns its kind.

Batches (``batch_layout`` says each shape and dtype before an epoch starts, so an engine can
allocate pinned buffers once; ``fill`` writes a batch into them, with no Python object per
sample): see each kind's module. An engine calls ``batch_layout`` once per epoch (a tensor per
entry per ring slot, pinned), then per batch ``fill(indices, views, crops=plan.boxes,
flips=plan.flips, size=spec.size)`` with the indices actually decoded (a substitute's own, so
it brings its own targets).
"""
from __future__ import annotations

import numpy as np

from ..fields import (FIELD_COLUMNS, FIELD_NAMES, KINDS, LABEL_ONLY, TARGET_DTYPES, Field, FieldsError, Geometry,
                     check_fields, field_objects, segments)
from .format import COLUMN_NAMES

__all__ = ["FIELD_COLUMNS", "FIELD_NAMES", "LABEL_ONLY", "TARGET_DTYPES", "FieldsError", "TargetColumns", "with_options",
           "check_fields", "segments"]


class TargetColumns:
    """The fields' columns of ``count`` records (some or all of FIELD_NAMES)."""

    def __init__(self, fields: dict[str, dict], arrays: dict[str, np.ndarray], count: int,
                 classes: dict[str, list[str]] | None = None):
        self.kinds: dict[str, Field] = field_objects(fields, classes) if fields else {}
        self.fields = {name: f.spec for name, f in self.kinds.items()}
        self.count = count
        self.arrays = {name: np.ascontiguousarray(arrays[name], dtype=TARGET_DTYPES[name]).reshape(-1)
                       for name in self.column_names()}
        for f in self.kinds.values():
            f.check_columns(self.arrays, count)

    def __len__(self) -> int:
        return self.count

    @property
    def class_lists(self) -> dict[str, list[str]]:
        return {name: f.classes for name, f in self.kinds.items() if f.has_classes}

    # -- columns as stored ----------------------------------------------------------------------

    def column_names(self) -> list[str]:
        return [name for f in self.kinds.values() for name in f.columns]

    def to_bytes(self) -> dict[str, bytes]:
        """The stored bytes of each column; the ``labels`` column is left to `format.column_bytes`."""
        return {name: self.arrays[name].tobytes() for name in self.column_names() if name not in COLUMN_NAMES}

    @classmethod
    def from_buffers(cls, fields: dict, buffers: dict, count: int,
                     classes: dict[str, list[str]] | None = None) -> "TargetColumns":
        arrays = {name: np.frombuffer(buffers[name], dtype=TARGET_DTYPES[name])
                  for field in fields for name in FIELD_COLUMNS[field]}
        return cls(fields, arrays, count, classes)

    def _with(self, arrays: dict, count: int, fields: dict | None = None) -> "TargetColumns":
        return TargetColumns(self.fields if fields is None else fields, arrays, count, self.class_lists)

    # -- subsets and joins ----------------------------------------------------------------------

    def take(self, indices) -> "TargetColumns":
        """The records ``indices``, in that order (a shuffle, a shard, the records packed)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        out = {}
        for f in self.kinds.values():
            out |= f.take(self.arrays, idx, self.count)
        return self._with(out, len(idx))

    @classmethod
    def concat(cls, parts: list["TargetColumns"]) -> "TargetColumns":
        """Parts with the same fields and classes end to end (shards); the maxima are the parts' largest."""
        first = parts[0]
        fields = {name: type(f).joined_spec([p.fields[name] for p in parts]) for name, f in first.kinds.items()}
        out = {}
        for name in first.column_names():
            if name.endswith("_offsets"):
                bases = np.cumsum([0] + [int(p.arrays[name][-1]) for p in parts[:-1]])
                out[name] = np.concatenate([p.arrays[name][:-1] + b for p, b in zip(parts, bases, strict=True)]
                                           + [[int(bases[-1] + parts[-1].arrays[name][-1])]])
            else:
                out[name] = np.concatenate([p.arrays[name] for p in parts])
        return first._with(out, sum(p.count for p in parts), fields)

    def fitted(self, sizes) -> tuple["TargetColumns", int]:
        """The columns fitted to their images (``sizes``: (height, width) per record) at pack
        time, and how many values were changed (boxes clipped to their image)."""
        arrays, changed = dict(self.arrays), 0
        for f in self.kinds.values():
            arrays, n = f.fit(arrays, self.count, sizes)
            changed += n
        return (self, 0) if not changed else (self._with(arrays, self.count), changed)

    def oriented(self, orientations, sizes) -> "TargetColumns":
        """The columns with the values in pixels of records turned by their EXIF orientation at
        pack time (``orientations``: 1..8 per record) moved from the stored frame into the
        displayed one (``sizes``: the turned images' (height, width) per record)."""
        if not np.any(np.asarray(orientations) != 1):
            return self
        arrays = dict(self.arrays)
        for f in self.kinds.values():
            arrays = f.orient(arrays, self.count, orientations, sizes)
        return self._with(arrays, self.count)

    def annotated(self) -> np.ndarray:
        """Per record: whether it holds any value in pixels (a box, a labelled keypoint)."""
        marks = [m for f in self.kinds.values() if (m := f.annotated(self.arrays, self.count)) is not None]
        return np.logical_or.reduce(marks) if marks else np.zeros(self.count, dtype=bool)

    # -- one record ------------------------------------------------------------------------------

    def record(self, i: int) -> dict:
        """Record ``i``'s targets as plain values: label int, labels list of ints, target float
        or list of floats, boxes list of [x0, y0, x1, y1, class], keypoints list of [x, y, visible]."""
        return {name: f.record(self.arrays, i, self.count) for name, f in self.kinds.items()}

    # -- batches ---------------------------------------------------------------------------------

    def batch_layout(self, batch_size: int) -> dict[str, tuple[tuple[int, ...], str]]:
        """{name: (shape, dtype)} of every array ``fill`` writes for a batch of ``batch_size``."""
        layout = {}
        for f in self.kinds.values():
            layout |= f.batch_layout(batch_size)
        return layout

    def fill(self, indices, out: dict[str, np.ndarray], *, crops=None, flips=None, size=None,
             min_visibility: float = 0.25) -> None:
        """Write the targets of records ``indices`` into ``out`` (arrays of ``batch_layout``,
        rows 0 .. len(indices) - 1). Boxes and keypoints need the batch's crops (top, left,
        height, width), flips and output (height, width): they come out in output pixels."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        geometry = None if crops is None or flips is None or size is None else \
            Geometry(np.asarray(crops).reshape(-1, 4), np.asarray(flips, dtype=bool).reshape(-1), tuple(size),
                     min_visibility)
        for f in self.kinds.values():
            f.fill(self.arrays, idx, out, self.count, geometry)

    # -- info, verify ----------------------------------------------------------------------------

    def stats(self) -> dict[str, dict]:
        """Per field: what ``feedline info`` shows (labels and boxes per image, target ranges, classes used)."""
        return {name: f.stats(self.arrays, self.count) for name, f in self.kinds.items()}

    def problems(self, sizes, frame: str = "") -> list[tuple[int, str]]:
        """(record, problem) for every value wrong, ordered by record (``sizes``: (height, width)
        per record, None or -1 when unknown; ``frame``: words after "outside its WxH image" that
        say which pixels the values are in)."""
        found = [p for f in self.kinds.values()
                 for p in (f.problems(self.arrays, self.count, sizes, frame) if f.in_pixels
                           else f.problems(self.arrays, self.count, sizes))]
        return sorted(found, key=lambda p: p[0])

    def naming_no_class(self) -> int:
        """How many records name a class outside their field's list (0 in a sound file)."""
        bad = np.zeros(self.count, dtype=bool)
        for f in self.kinds.values():
            named = f.class_occurrences(self.arrays, self.count)
            if named is not None:
                owner, classes = named
                bad[np.asarray(owner)[(classes < 0) | (classes >= f.num_classes)]] = True
        return int(bad.sum())

    def class_occurrences(self, name: str) -> np.ndarray:
        """Per class of field ``name``: the records that name it (once per record however often)."""
        f = self.kinds[name]
        owner, classes = f.class_occurrences(self.arrays, self.count)
        k = max(f.num_classes, 1)
        valid = (classes >= 0) & (classes < k)
        named = np.unique(np.asarray(owner)[valid] * k + classes[valid]) % k
        return np.bincount(named, minlength=f.num_classes)


def with_options(columns: TargetColumns, **values) -> TargetColumns:
    """``columns`` with spec values set on the field that takes them (``flip_pairs``: the
    keypoints'); FieldsError when no field does, or a value does not fit its field."""
    fields = {name: dict(spec) for name, spec in columns.fields.items()}
    for key, value in values.items():
        takers = [name for name, f in columns.kinds.items() if key in f.optional_keys]
        if not takers:
            kinds = [k.name for k in KINDS.values() if key in k.optional_keys]
            raise FieldsError(f"the labels have no {' or '.join(kinds)} to take {key}")
        fields[takers[0]][key] = value
    return TargetColumns(fields, columns.arrays, columns.count, columns.class_lists)
