"""``keypoints``: a fixed count K of points per record, ``[[x, y, visible], ...]`` in source
pixels (JSON Lines only; ``visible`` as COCO writes it: 0 not labelled, 1 labelled but hidden,
2 visible). Stored as ``keypoints`` float32[n * K * 3]; spec ``{"count": K}``.

In a batch: float32 (B, K, 3) in output pixels, following each sample's crop (RandomResizedCrop
in training, the evaluation crop otherwise), resize and flip as the pixels do: x -> (x - left)
* width / crop width, mirrored (x -> width - x) when flipped. A point outside the crop, or not
labelled, comes out (0, 0, 0). Refused with the transforms boxes refuse.

A mirror makes a left wrist look like a right one: with ``flip_pairs`` in the spec (mmpose's
flip_indices as pairs, given at pack time: ``pack --flip-pairs 1:2,3:4``), a flipped sample's
points also trade places within each pair, so point k keeps its name. Without it (stores
packed before, or sets without left and right) a flip keeps each point's index. An image
turned by its EXIF orientation at pack time turns its points with it when they are in the
stored frame (`orient`), and a mirroring orientation (2, 4, 5, 7) trades the pairs too."""
from __future__ import annotations

import math

from .base import GEOMETRIC, MIRRORING, MIXING, Field, FieldsError, oriented_xy, spread
from .lazy_numpy import np

VISIBILITY = (0, 1, 2)


class Keypoints(Field):
    name = "keypoints"
    columns = {"keypoints": "<f4"}
    spec_keys = {"count": int}
    optional_keys = {"flip_pairs": list}   # [[a, b], ...]: points that trade places in a mirror
    refuses = frozenset({GEOMETRIC, MIXING})
    in_pixels = True
    csv = False
    example = '"keypoints": [[x, y, visible], ...]'

    @classmethod
    def check_spec(cls, spec) -> dict:
        spec = super().check_spec(spec)
        if "flip_pairs" in spec:
            check_flip_pairs(spec["flip_pairs"], spec["count"])
        return spec

    def permutation(self):
        """Where each point goes in a mirror: its pair's index (its own without one)."""
        perm = np.arange(self.spec["count"])
        for a, b in self.spec.get("flip_pairs", ()):
            perm[a], perm[b] = b, a
        return perm

    @classmethod
    def parse(cls, parser, value, line: int) -> list[list[float]]:
        if not isinstance(value, list):
            raise parser.fail(line, f"keypoints {value!r} is not a list of [x, y, visible]")
        points = []
        for k, p in enumerate(value):
            if (not isinstance(p, list) or len(p) != 3 or any(isinstance(v, bool) or not isinstance(v, (int, float))
                                                              for v in p) or not all(map(math.isfinite, p))):
                raise parser.fail(line, f"keypoint {k} {p!r} is not [x, y, visible] (2 numbers in source pixels, "
                                        "then 0, 1 or 2)")
            if p[2] not in VISIBILITY:
                raise parser.fail(line, f"keypoint {k} {p!r}: visible is {p[2]!r}, not 0 (not labelled), "
                                        "1 (labelled, hidden) or 2 (visible)")
            points.append([float(v) for v in p])
        return points

    @classmethod
    def build(cls, parser, lines, parsed, index):
        count = len(parsed[0])
        for line, points in zip(lines, parsed, strict=True):
            if len(points) != count:
                raise parser.fail(line, f"{len(points)} keypoints, but {parser.unit} {lines[0]} has {count}: "
                                        "every image needs the same number (write [0, 0, 0] for a point "
                                        "not labelled)")
        if count == 0:
            raise parser.fail(lines[0], "keypoints is empty: list each image's points as [x, y, visible]")
        return {"count": count}, {"keypoints": np.array(parsed, dtype=np.float64).reshape(-1)}

    def _points(self, a, n):
        return a["keypoints"].reshape(n, self.spec["count"], 3)

    def check_columns(self, a, n):
        if len(a["keypoints"]) != n * self.spec["count"] * 3:
            raise FieldsError(f"keypoints: {len(a['keypoints'])} values, not {n} x {self.spec['count']} x 3")

    def take(self, a, idx, n):
        return {"keypoints": self._points(a, n)[idx]}

    def record(self, a, i, n):
        return self._points(a, n)[i].tolist()

    def batch_layout(self, b):
        return {"keypoints": ((b, self.spec["count"], 3), "float32")}

    def fill(self, a, idx, out, n, geometry):
        if geometry is None:
            raise ValueError("keypoints follow the crop: fill needs crops, flips and size")
        out["keypoints"][:len(idx)] = to_output(self._points(a, n)[idx], geometry.crops, geometry.flips,
                                                geometry.size, self.permutation())

    def stats(self, a, n):
        visible = np.count_nonzero(self._points(a, n)[:, :, 2] > 0, axis=1)
        pairs = {"flip_pairs": len(self.spec["flip_pairs"])} if "flip_pairs" in self.spec else {}
        return {"count": self.spec["count"], "visible_per_image": spread(visible), **pairs}

    @classmethod
    def describe(cls, stats):
        pairs = f", {stats['flip_pairs']} left/right pairs" if stats.get("flip_pairs") else ""
        return f"keypoints ({stats['count']} per image, mean {stats['visible_per_image']['mean']:.2f} labelled{pairs})"

    def orient(self, a, n, orientations, sizes):
        p = self._points(a, n).astype(np.float64)
        o = np.asarray(orientations).reshape(-1, 1)
        hw = np.asarray(sizes, dtype=np.float64).reshape(-1, 2)
        x, y = oriented_xy(p[:, :, 0], p[:, :, 1], o, hw[:, 1:], hw[:, :1])
        turned = np.stack([x, y, p[:, :, 2]], axis=2)
        mirrored = np.isin(o[:, 0], MIRRORING)
        turned[mirrored] = turned[mirrored][:, self.permutation()]
        return {**a, "keypoints": turned.astype(np.float32).reshape(-1)}

    def annotated(self, a, n):
        return np.any(self._points(a, n)[:, :, 2] > 0, axis=1)

    def problems(self, a, n, sizes, frame: str = ""):
        p = self._points(a, n).astype(np.float64)
        bad_value = ~np.all(np.isfinite(p), axis=2) | ~np.isin(p[:, :, 2], VISIBILITY)
        outside = np.zeros_like(bad_value)
        if sizes is not None and n:
            hw = np.asarray(sizes, dtype=np.float64).reshape(-1, 2)
            h, w = hw[:, :1], hw[:, 1:]
            outside = ((h > 0) & (w > 0) & (p[:, :, 2] > 0)
                       & ((p[:, :, 0] < 0) | (p[:, :, 0] > w) | (p[:, :, 1] < 0) | (p[:, :, 1] > h)))
        problems = []
        for i, k in zip(*np.nonzero(bad_value | outside), strict=True):
            why = ("is not [x, y, visible] with visible 0, 1 or 2" if bad_value[i, k] else
                   f"is labelled but outside its {int(hw[i, 1])}x{int(hw[i, 0])} (WxH) image{frame}")
            problems.append((int(i), f"keypoint {int(k)} {p[i, k].tolist()} {why}"))
        return problems


def check_flip_pairs(pairs, count: int) -> None:
    """FieldsError unless ``pairs`` is a list of [a, b] of distinct point indices 0..count - 1,
    each index in one pair at most."""
    seen: set[int] = set()
    for pair in pairs:
        if (not isinstance(pair, (list, tuple)) or len(pair) != 2
                or any(isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < count for k in pair)):
            raise FieldsError(f"flip pair {pair!r}: expected two point indices in 0..{count - 1} ({count} keypoints)")
        if pair[0] == pair[1] or seen & set(pair):
            again = pair[0] if pair[0] == pair[1] or pair[0] in seen else pair[1]
            raise FieldsError(f"flip pair {list(pair)!r}: point {again} is in more than one pair (or paired with "
                              "itself); each point trades places with one other at most")
        seen.update(pair)


def to_output(points, crops, flips, size, permutation=None) -> np.ndarray:
    """Points (N, K, 3: x, y, visible; source pixels) through each sample's crop (N, 4: top, left,
    height, width) and flip (N,) into an output of ``size`` (height, width): float32 (N, K, 3),
    (0, 0, 0) for a point outside the crop or not labelled. A flipped sample's point k comes
    from point ``permutation[k]`` (its left/right pair; none: itself)."""
    c = np.asarray(crops, dtype=np.float64).reshape(-1, 1, 4)
    p = np.asarray(points, dtype=np.float64).reshape(len(c), -1, 3)
    flip = np.asarray(flips, dtype=bool).reshape(-1, 1)
    top, left, ch, cw = c[..., 0], c[..., 1], c[..., 2], c[..., 3]
    x, y, v = p[..., 0], p[..., 1], p[..., 2]
    out_h, out_w = size
    with np.errstate(divide="ignore", invalid="ignore"):   # a crop of no area (a failed read): nothing inside
        ox, oy = (x - left) * (out_w / cw), (y - top) * (out_h / ch)
    ox = np.where(flip, out_w - ox, ox)
    inside = (v > 0) & (x >= left) & (x <= left + cw) & (y >= top) & (y <= top + ch) & (cw > 0) & (ch > 0)
    out = np.where(inside[..., None], np.stack([ox, oy, v], axis=-1), 0).astype(np.float32)
    if permutation is not None:
        out[flip[:, 0]] = out[flip[:, 0]][:, permutation]
    return out


KIND = Keypoints   # what the registry lists
