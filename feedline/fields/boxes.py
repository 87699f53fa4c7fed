"""``boxes``: boxes in source pixels, ``box_offsets`` int64[n + 1], ``box_coords`` float32[m * 4]
(x0, y0, x1, y1) and ``box_classes`` int32[m]; spec ``{"max": most boxes of one record}``;
JSON Lines only. In a batch, in output pixels (`feedline.dataset.box_geometry`): boxes float32 (B, M, 4),
box_classes int64 (B, M) (-1 where padding), box_counts int64 (B,). A box with no area, or
wholly outside its image, is refused at pack time and by verify; one partly outside is
clipped to its image at pack time; one on an edge (x0 == width) has no area inside: it is
outside. An image turned by its EXIF orientation at pack time turns its boxes with it
when they are in the stored frame (`orient`)."""
from __future__ import annotations

import math

from .base import GEOMETRIC, MIXING, Field, FieldsError, check_offsets, oriented_xy, owners, segments, spread
from .lazy_numpy import np


class Boxes(Field):
    name = "boxes"
    columns = {"box_offsets": "<i8", "box_coords": "<f4", "box_classes": "<i4"}
    spec_keys = {"max": int}
    joined_keys = ("max",)
    has_classes = True
    refuses = frozenset({GEOMETRIC, MIXING})
    in_pixels = True
    csv = False
    example = '"boxes": [[x0, y0, x1, y1, class], ...]'

    @classmethod
    def parse(cls, parser, value, line: int) -> list[tuple[list[float], str]]:
        if not isinstance(value, list):
            raise parser.fail(line, f"boxes {value!r} is not a list of [x0, y0, x1, y1, class]")
        return [cls._box(parser, b, line, k) for k, b in enumerate(value)]

    @classmethod
    def _box(cls, parser, value, line: int, k: int) -> tuple[list[float], str]:
        if (not isinstance(value, list) or len(value) != 5
                or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value[:4])):
            raise parser.fail(line, f"box {k} {value!r} is not [x0, y0, x1, y1, class] (4 numbers in source "
                                    "pixels and a class)")
        x0, y0, x1, y1 = (float(v) for v in value[:4])
        if not all(math.isfinite(v) for v in (x0, y0, x1, y1)) or not (x1 > x0 and y1 > y0):
            raise parser.fail(line, f"box {k} {value!r}: needs x0 < x1 and y0 < y1 (corners in source pixels)")
        return [x0, y0, x1, y1], parser.token(value[4], line, f"box {k}'s class")

    @classmethod
    def tokens(cls, parsed) -> list[str]:
        return [c for _, c in parsed]

    @classmethod
    def build(cls, parser, lines, parsed, index):
        counts = [len(p) for p in parsed]
        return {"max": max(counts)}, {
            "box_offsets": np.cumsum([0, *counts]),
            "box_coords": np.array([c for p in parsed for c, _ in p], dtype=np.float64).reshape(-1),
            "box_classes": [index[k] for p in parsed for _, k in p]}

    def check_columns(self, a, n):
        check_offsets(self.name, "box_offsets", a["box_offsets"], len(a["box_classes"]), n, self.spec["max"])
        if len(a["box_coords"]) != 4 * len(a["box_classes"]):
            raise FieldsError("box_coords: not 4 numbers per box")

    def take(self, a, idx, n):
        pos, offsets = segments(a["box_offsets"], idx)
        return {"box_offsets": offsets, "box_coords": a["box_coords"].reshape(-1, 4)[pos],
                "box_classes": a["box_classes"][pos]}

    def record(self, a, i, n):
        lo, hi = a["box_offsets"][i], a["box_offsets"][i + 1]
        coords = a["box_coords"].reshape(-1, 4)[lo:hi].tolist()
        return [[*c, int(k)] for c, k in zip(coords, a["box_classes"][lo:hi].tolist(), strict=True)]

    def batch_layout(self, b):
        m = self.spec["max"]
        return {"boxes": ((b, m, 4), "float32"), "box_classes": ((b, m), "int64"), "box_counts": ((b,), "int64")}

    def fill(self, a, idx, out, n, geometry):
        if geometry is None:
            raise ValueError("boxes follow the crop: fill needs crops, flips and size")
        from ..dataset.box_geometry import boxes_to_batch   # numpy at its top: not for a pack's metadata
        k = len(idx)
        pos, offsets = segments(a["box_offsets"], idx)
        boxes_to_batch(a["box_coords"].reshape(-1, 4)[pos], a["box_classes"][pos], offsets, geometry.crops,
                       geometry.flips, geometry.size, geometry.min_visibility, out["boxes"][:k],
                       out["box_classes"][:k], out["box_counts"][:k])

    def stats(self, a, n):
        return {"per_image": spread(np.diff(a["box_offsets"])), "total": int(len(a["box_classes"])),
                "classes_used": int(len(np.unique(a["box_classes"])))}

    @classmethod
    def describe(cls, stats):
        p = stats["per_image"]
        return f"boxes ({p['min']}-{p['max']} per image, mean {p['mean']:.2f}, {stats['total']:,} in all)"

    def class_occurrences(self, a, n):
        return owners(a["box_offsets"], n), a["box_classes"]

    def _image_sizes(self, a, n, sizes):
        """(height, width) of each box's image as float64, and whether it is known."""
        owner = owners(a["box_offsets"], n)
        if sizes is None or not len(owner):
            return None, None, np.zeros(len(owner), dtype=bool)
        h, w = np.asarray(sizes).reshape(-1, 2)[owner].T.astype(np.float64)
        return h, w, (h > 0) & (w > 0)

    def problems(self, a, n, sizes, frame: str = ""):
        off, classes, k = a["box_offsets"], a["box_classes"], self.num_classes
        b = a["box_coords"].reshape(-1, 4).astype(np.float64)
        owner = owners(off, n)
        bad_class = (classes < 0) | (classes >= k)
        no_area = ~np.all(np.isfinite(b), axis=1) | (b[:, 2] <= b[:, 0]) | (b[:, 3] <= b[:, 1])
        h, w, known = self._image_sizes(a, n, sizes)
        outside = known & ((b[:, 0] >= w) | (b[:, 1] >= h) | (b[:, 2] <= 0) | (b[:, 3] <= 0)) if h is not None \
            else known
        problems = []
        for j in np.flatnonzero(bad_class | no_area | outside):
            why = (f"class {int(classes[j])} outside 0..{k - 1}" if bad_class[j] else
                   "no area (needs x0 < x1 and y0 < y1)" if no_area[j] else
                   f"wholly outside its {int(w[j])}x{int(h[j])} (WxH) image{frame}")
            problems.append((int(owner[j]), f"box {int(j - off[owner[j]])} {[*b[j].tolist(), int(classes[j])]}: {why}"))
        return problems

    def fit(self, a, n, sizes):
        h, w, known = self._image_sizes(a, n, sizes)
        if h is None:
            return a, 0
        b = a["box_coords"].reshape(-1, 4).astype(np.float64)
        limit = np.stack([w, h, w, h], axis=1)
        clipped = np.where(known[:, None], np.clip(b, 0, limit), b)
        changed = int(np.count_nonzero(np.any(clipped != b, axis=1)))
        return {**a, "box_coords": clipped.astype(np.float32).reshape(-1)}, changed


    def orient(self, a, n, orientations, sizes):
        owner = owners(a["box_offsets"], n)
        if not len(owner):
            return a
        h, w = np.asarray(sizes, dtype=np.float64).reshape(-1, 2)[owner].T
        o = np.asarray(orientations)[owner]
        b = a["box_coords"].reshape(-1, 4).astype(np.float64)
        x0, y0 = oriented_xy(b[:, 0], b[:, 1], o, w, h)
        x1, y1 = oriented_xy(b[:, 2], b[:, 3], o, w, h)
        turned = np.stack([np.minimum(x0, x1), np.minimum(y0, y1), np.maximum(x0, x1), np.maximum(y0, y1)], axis=1)
        return {**a, "box_coords": turned.astype(np.float32).reshape(-1)}

    def annotated(self, a, n):
        return np.diff(a["box_offsets"]) > 0


KIND = Boxes   # what the registry lists
