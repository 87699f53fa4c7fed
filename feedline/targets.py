"""A data set's targets as flat arrays, one layout for the scan, the stores and the batch.

A store holds some of four fields (``fields``: name -> spec):

- ``label``: one class per record, int64; the classic ``labels`` column.
- ``labels``: several classes per record, a compact list: ``label_set_offsets`` int64[n + 1]
  and ``label_set_classes`` int32[...]; spec ``{"max": most classes of one record}``.
- ``target``: ``width`` floats per record, ``targets`` float32[n * width]; spec
  ``{"width": w, "scalar": true when each record has one number rather than a list}``.
- ``boxes``: boxes in source pixels, ``box_offsets`` int64[n + 1], ``box_coords``
  float32[m * 4] (x0, y0, x1, y1) and ``box_classes`` int32[m]; spec ``{"max": most boxes of
  one record}``.

Batches (``batch_layout`` says each shape and dtype before an epoch starts, so an engine can
allocate pinned buffers once; ``fill`` writes a batch into them, with no Python object per
sample): label int64 (B,); labels float32 (B, K) multi-hot; target float32 (B,) or (B, W);
boxes float32 (B, M, 4) in output pixels (see `feedline.boxes`), box_classes int64 (B, M)
(-1 where padding) and box_counts int64 (B,), with M the store's ``max`` boxes per record.
An engine calls ``batch_layout`` once per epoch (a tensor per entry per ring slot, pinned), then
per batch ``fill(indices, views, crops=plan.boxes, flips=plan.flips, size=spec.size)`` with
the indices actually decoded (a substitute's own, so it brings its own targets).
"""
from __future__ import annotations

import numpy as np

from .fields import FIELD_COLUMNS, FIELD_NAMES, LABEL_ONLY, TARGET_DTYPES, FieldsError, check_fields

__all__ = ["FIELD_COLUMNS", "FIELD_NAMES", "LABEL_ONLY", "TARGET_DTYPES", "FieldsError", "TargetColumns",
           "check_fields", "segments"]


def segments(offsets: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where the items of records ``indices`` of a compact list lie: (positions of their items in
    order, offsets of the gathered list). Vectorized: no loop over records."""
    starts, stops = offsets[indices], offsets[np.asarray(indices) + 1]
    counts = stops - starts
    new_offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=new_offsets[1:])
    positions = np.arange(new_offsets[-1], dtype=np.int64) + np.repeat(starts - new_offsets[:-1], counts)
    return positions, new_offsets


def _check_columns(fields: dict, a: dict, n: int) -> None:
    if "label" in fields and len(a["labels"]) != n:
        raise FieldsError(f"labels: {len(a['labels'])} values for {n} records")
    if "target" in fields and len(a["targets"]) != n * fields["target"]["width"]:
        raise FieldsError(f"targets: {len(a['targets'])} values, not {n} x {fields['target']['width']}")
    for field, offsets, values in (("labels", "label_set_offsets", "label_set_classes"),
                                   ("boxes", "box_offsets", "box_classes")):
        if field not in fields:
            continue
        off = a[offsets]
        if len(off) != n + 1 or off[0] != 0 or bool(np.any(off[1:] < off[:-1])) or off[-1] != len(a[values]):
            raise FieldsError(f"{offsets}: offsets out of order or disagreeing with {values}")
        most = int(np.max(np.diff(off), initial=0))
        if most > fields[field]["max"]:
            raise FieldsError(f"{field}: a record holds {most}, more than the stated max "
                              f"{fields[field]['max']}")
    if "boxes" in fields and len(a["box_coords"]) != 4 * len(a["box_classes"]):
        raise FieldsError("box_coords: not 4 numbers per box")


class TargetColumns:
    """The fields' columns of ``count`` records (some or all of FIELD_NAMES)."""

    def __init__(self, fields: dict[str, dict], arrays: dict[str, np.ndarray], count: int):
        self.fields = check_fields(fields) if fields else {}
        self.count = count
        self.arrays = {name: np.ascontiguousarray(arrays[name], dtype=TARGET_DTYPES[name]).reshape(-1)
                       for field in self.fields for name in FIELD_COLUMNS[field]}
        _check_columns(self.fields, self.arrays, count)

    def __len__(self) -> int:
        return self.count

    # -- columns as stored ----------------------------------------------------------------------

    def column_names(self) -> list[str]:
        return [name for field in self.fields for name in FIELD_COLUMNS[field]]

    def to_bytes(self) -> dict[str, bytes]:
        """The stored bytes of each column; the ``labels`` column is left to `format.column_bytes`."""
        return {name: self.arrays[name].tobytes() for name in self.column_names() if name != "labels"}

    @classmethod
    def from_buffers(cls, fields: dict, buffers: dict, count: int) -> "TargetColumns":
        arrays = {name: np.frombuffer(buffers[name], dtype=TARGET_DTYPES[name])
                  for field in fields for name in FIELD_COLUMNS[field]}
        return cls(fields, arrays, count)

    # -- subsets and joins ----------------------------------------------------------------------

    def take(self, indices) -> "TargetColumns":
        """The records ``indices``, in that order (a shuffle, a shard, the records packed)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        a, out = self.arrays, {}
        if "label" in self.fields:
            out["labels"] = a["labels"][idx]
        if "labels" in self.fields:
            pos, out["label_set_offsets"] = segments(a["label_set_offsets"], idx)
            out["label_set_classes"] = a["label_set_classes"][pos]
        if "target" in self.fields:
            out["targets"] = a["targets"].reshape(self.count, -1)[idx]
        if "boxes" in self.fields:
            pos, out["box_offsets"] = segments(a["box_offsets"], idx)
            out["box_coords"] = a["box_coords"].reshape(-1, 4)[pos]
            out["box_classes"] = a["box_classes"][pos]
        return TargetColumns(self.fields, out, len(idx))

    @classmethod
    def concat(cls, parts: list["TargetColumns"]) -> "TargetColumns":
        """Parts with the same fields end to end (shards); the maxima are the parts' largest."""
        fields = {name: dict(spec) for name, spec in parts[0].fields.items()}
        for name in ("labels", "boxes"):
            if name in fields:
                fields[name]["max"] = max(p.fields[name]["max"] for p in parts)
        out = {}
        for name in (n for f in fields for n in FIELD_COLUMNS[f]):
            if name.endswith("_offsets"):
                bases = np.cumsum([0] + [int(p.arrays[name][-1]) for p in parts[:-1]])
                out[name] = np.concatenate([p.arrays[name][:-1] + b for p, b in zip(parts, bases, strict=True)]
                                           + [[int(bases[-1] + parts[-1].arrays[name][-1])]])
            else:
                out[name] = np.concatenate([p.arrays[name] for p in parts])
        return cls(fields, out, sum(p.count for p in parts))

    # -- one record ------------------------------------------------------------------------------

    def record(self, i: int) -> dict:
        """Record ``i``'s targets as plain values: label int, labels list of ints, target float
        or list of floats, boxes list of [x0, y0, x1, y1, class]."""
        a, out = self.arrays, {}
        if "label" in self.fields:
            out["label"] = int(a["labels"][i])
        if "labels" in self.fields:
            off = a["label_set_offsets"]
            out["labels"] = a["label_set_classes"][off[i]:off[i + 1]].tolist()
        if "target" in self.fields:
            w = self.fields["target"]["width"]
            values = a["targets"][i * w:(i + 1) * w].tolist()
            out["target"] = values[0] if self.fields["target"]["scalar"] else values
        if "boxes" in self.fields:
            lo, hi = a["box_offsets"][i], a["box_offsets"][i + 1]
            coords = a["box_coords"].reshape(-1, 4)[lo:hi].tolist()
            out["boxes"] = [[*c, int(k)] for c, k in zip(coords, a["box_classes"][lo:hi].tolist(), strict=True)]
        return out

    # -- batches ---------------------------------------------------------------------------------

    def batch_layout(self, batch_size: int, num_classes: int) -> dict[str, tuple[tuple[int, ...], str]]:
        """{name: (shape, dtype)} of every array ``fill`` writes for a batch of ``batch_size``."""
        b, layout = batch_size, {}
        if "label" in self.fields:
            layout["label"] = ((b,), "int64")
        if "labels" in self.fields:
            layout["labels"] = ((b, num_classes), "float32")
        if "target" in self.fields:
            spec = self.fields["target"]
            layout["target"] = ((b,) if spec["scalar"] else (b, spec["width"]), "float32")
        if "boxes" in self.fields:
            m = self.fields["boxes"]["max"]
            layout |= {"boxes": ((b, m, 4), "float32"), "box_classes": ((b, m), "int64"),
                       "box_counts": ((b,), "int64")}
        return layout

    def fill(self, indices, out: dict[str, np.ndarray], *, crops=None, flips=None, size=None,
             min_visibility: float = 0.25) -> None:
        """Write the targets of records ``indices`` into ``out`` (arrays of ``batch_layout``,
        rows 0 .. len(indices) - 1). Boxes need the batch's crops (top, left, height, width),
        flips and output (height, width): they come out in output pixels."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n, a = len(idx), self.arrays
        if "label" in self.fields:
            out["label"][:n] = a["labels"][idx]
        if "labels" in self.fields:
            pos, offsets = segments(a["label_set_offsets"], idx)
            hot = out["labels"][:n]
            hot[...] = 0
            hot[np.repeat(np.arange(n), np.diff(offsets)), a["label_set_classes"][pos]] = 1
        if "target" in self.fields:
            out["target"][:n] = a["targets"].reshape(self.count, -1)[idx].reshape(out["target"][:n].shape)
        if "boxes" in self.fields:
            from .boxes import boxes_to_batch
            if crops is None or flips is None or size is None:
                raise ValueError("boxes follow the crop: fill needs crops, flips and size")
            pos, offsets = segments(a["box_offsets"], idx)
            boxes_to_batch(a["box_coords"].reshape(-1, 4)[pos], a["box_classes"][pos], offsets, crops, flips,
                           size, min_visibility, out["boxes"][:n], out["box_classes"][:n], out["box_counts"][:n])
