"""``target``: ``width`` floats per record, ``targets`` float32[n * width]; spec ``{"width": w,
"scalar": true when each record has one number rather than a list}``. In a batch: float32
(B,) or (B, W)."""
from __future__ import annotations

import math

from .base import Field, FieldsError
from .lazy_numpy import np

EXACT_FLOAT32 = 1 << 24     # integers beyond this do not survive float32


class Target(Field):
    name = "target"
    columns = {"targets": "<f4"}
    spec_keys = {"width": int, "scalar": bool}
    example = '"target": [0.5, 2.0]'
    header_words = ("targets",)
    task = "regress"

    @classmethod
    def check_spec(cls, spec):
        spec = super().check_spec(spec)
        if spec["width"] < 1 or (spec["scalar"] and spec["width"] != 1):
            raise FieldsError(f"field 'target': width {spec['width']} is not a valid width")
        return spec

    def outputs(self) -> int:
        return self.spec["width"]

    @classmethod
    def parse(cls, parser, value, line: int) -> tuple[list[float], bool]:
        """(numbers, whether the row wrote a list)."""
        if parser.unit == "row":
            cells = [c.strip() for c in value.split(";")]
            try:
                out = [float(c) for c in cells]
            except ValueError:
                raise parser.fail(line, f"target {value!r} is not a number, or numbers separated by ';'") from None
        else:
            items = value if isinstance(value, list) else [value]
            if not items or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in items):
                raise parser.fail(line, f"target {value!r} is not a number or a list of numbers")
            out = [float(v) for v in items]
        if not all(math.isfinite(v) for v in out):
            raise parser.fail(line, f"target {value!r} is not finite: write a number")
        return out, parser.unit == "line" and isinstance(value, list)

    @classmethod
    def build(cls, parser, lines, parsed, index):
        width, listed = len(parsed[0][0]), parsed[0][1]
        for line, (numbers, is_list) in zip(lines, parsed, strict=True):
            if len(numbers) != width:
                raise parser.fail(line, f"target has {len(numbers)} number(s), but {parser.unit} {lines[0]} "
                                        f"has {width}: every {parser.unit} needs the same number")
            if is_list != listed:
                raise parser.fail(line, f"target is {'a list' if is_list else 'a number'}, but on line "
                                        f"{lines[0]} {'a list' if listed else 'a number'}: write them alike")
        values = np.array([p[0] for p in parsed], dtype=np.float64).reshape(len(parsed), width)
        inexact = np.flatnonzero(np.any((np.abs(values) > EXACT_FLOAT32) & (values.astype(np.float32) != values),
                                        axis=1))
        if len(inexact):
            raise parser.fail(lines[inexact[0]], f"target {parsed[inexact[0]][0]} does not survive float32 (the "
                                                 f"stored type), which holds integers up to {EXACT_FLOAT32:,} "
                                                 "exactly: subtract an offset or scale it")
        return {"width": width, "scalar": width == 1 and not listed}, {"targets": values}

    def check_columns(self, a, n):
        if len(a["targets"]) != n * self.spec["width"]:
            raise FieldsError(f"targets: {len(a['targets'])} values, not {n} x {self.spec['width']}")

    def take(self, a, idx, n):
        return {"targets": a["targets"].reshape(n, -1)[idx]}

    def record(self, a, i, n):
        w = self.spec["width"]
        values = a["targets"][i * w:(i + 1) * w].tolist()
        return values[0] if self.spec["scalar"] else values

    def batch_layout(self, b):
        return {"target": ((b,) if self.spec["scalar"] else (b, self.spec["width"]), "float32")}

    def fill(self, a, idx, out, n, geometry):
        rows = out["target"][:len(idx)]
        rows[...] = a["targets"].reshape(n, -1)[idx].reshape(rows.shape)

    def stats(self, a, n):
        values = a["targets"].reshape(n, -1).astype(np.float64)
        empty = len(values) == 0
        return {"width": int(values.shape[1]), "scalar": self.spec["scalar"],
                "min": [] if empty else values.min(axis=0).tolist(),
                "max": [] if empty else values.max(axis=0).tolist(),
                "mean": [] if empty else values.mean(axis=0).tolist()}

    @classmethod
    def describe(cls, stats):
        ranges = ", ".join(f"{lo:g}..{hi:g}" for lo, hi in zip(stats["min"], stats["max"], strict=True))
        return f"target ({'a number' if stats['scalar'] else str(stats['width']) + ' numbers'}: {ranges})"

    def problems(self, a, n, sizes):
        values = a["targets"].reshape(n, -1)
        return [(int(i), f"target {values[i].tolist()} is not finite")
                for i in np.flatnonzero(~np.all(np.isfinite(values), axis=1))]


KIND = Target   # what the registry lists
