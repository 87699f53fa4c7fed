"""What a data set's fields hold and what is wrong with them, from their columns alone:
the statistics ``feedline info`` shows and the checks ``feedline verify`` makes. Vectorized."""
from __future__ import annotations

import numpy as np

from .targets import TargetColumns


def _spread(counts: np.ndarray) -> dict:
    if len(counts) == 0:
        return {"min": 0, "mean": 0.0, "max": 0}
    return {"min": int(counts.min()), "mean": float(counts.mean()), "max": int(counts.max())}


def field_stats(columns: TargetColumns) -> dict[str, dict]:
    """Per field: labels and boxes per image, target ranges per component, classes used."""
    a, stats = columns.arrays, {}
    for name in columns.fields:
        if name == "label":
            stats[name] = {"classes_used": int(len(np.unique(a["labels"])))}
        elif name == "labels":
            stats[name] = {"per_image": _spread(np.diff(a["label_set_offsets"])),
                           "classes_used": int(len(np.unique(a["label_set_classes"])))}
        elif name == "target":
            values = a["targets"].reshape(len(columns), -1).astype(np.float64)
            empty = len(values) == 0
            stats[name] = {"width": int(values.shape[1]), "scalar": columns.fields[name]["scalar"],
                           "min": [] if empty else values.min(axis=0).tolist(),
                           "max": [] if empty else values.max(axis=0).tolist(),
                           "mean": [] if empty else values.mean(axis=0).tolist()}
        else:
            stats[name] = {"per_image": _spread(np.diff(a["box_offsets"])), "total": int(len(a["box_classes"])),
                           "classes_used": int(len(np.unique(a["box_classes"])))}
    return stats


def describe_fields(stats: dict[str, dict]) -> str:
    """One line for people: each field and what it holds."""
    parts = []
    for name, s in stats.items():
        if name == "labels":
            p = s["per_image"]
            parts.append(f"labels ({p['min']}-{p['max']} per image, mean {p['mean']:.2f})")
        elif name == "target":
            ranges = ", ".join(f"{lo:g}..{hi:g}" for lo, hi in zip(s["min"], s["max"], strict=True))
            parts.append(f"target ({'a number' if s['scalar'] else str(s['width']) + ' numbers'}: {ranges})")
        elif name == "boxes":
            p = s["per_image"]
            parts.append(f"boxes ({p['min']}-{p['max']} per image, mean {p['mean']:.2f}, {s['total']:,} in all)")
        else:
            parts.append(name)
    return ", ".join(parts)


def field_problems(columns: TargetColumns, num_classes: int, sizes: np.ndarray | None) -> list[tuple[int, str]]:
    """(record, problem) for every class out of range, target not finite, box with no area or
    wholly outside its image (``sizes``: (height, width) per record; None or -1 when unknown)."""
    a, k, problems = columns.arrays, num_classes, []
    if "label" in columns.fields:
        labels = a["labels"]
        problems += [(int(i), f"label {int(labels[i])} outside 0..{k - 1} ({k} classes)")
                     for i in np.flatnonzero((labels < 0) | (labels >= k))]
    if "labels" in columns.fields:
        off, classes = a["label_set_offsets"], a["label_set_classes"]
        owner = np.repeat(np.arange(len(columns)), np.diff(off))
        problems += [(int(owner[j]), f"labels: class {int(classes[j])} outside 0..{k - 1} ({k} classes)")
                     for j in np.flatnonzero((classes < 0) | (classes >= k))]
    if "target" in columns.fields:
        values = a["targets"].reshape(len(columns), -1)
        problems += [(int(i), f"target {values[i].tolist()} is not finite")
                     for i in np.flatnonzero(~np.all(np.isfinite(values), axis=1))]
    if "boxes" in columns.fields:
        problems += _box_problems(columns, k, sizes)
    return sorted(problems, key=lambda p: p[0])


def _box_problems(columns: TargetColumns, k: int, sizes) -> list[tuple[int, str]]:
    a = columns.arrays
    off, classes = a["box_offsets"], a["box_classes"]
    b = a["box_coords"].reshape(-1, 4).astype(np.float64)
    owner = np.repeat(np.arange(len(columns)), np.diff(off))
    bad_class = (classes < 0) | (classes >= k)
    no_area = ~np.all(np.isfinite(b), axis=1) | (b[:, 2] <= b[:, 0]) | (b[:, 3] <= b[:, 1])
    outside = np.zeros(len(b), dtype=bool)
    if sizes is not None and len(b):
        h, w = (np.asarray(sizes).reshape(-1, 2)[owner].T).astype(np.float64)
        known = (h > 0) & (w > 0)
        outside = known & ((b[:, 0] >= w) | (b[:, 1] >= h) | (b[:, 2] <= 0) | (b[:, 3] <= 0))
    problems = []
    for j in np.flatnonzero(bad_class | no_area | outside):
        box = [*b[j].tolist(), int(classes[j])]
        why = (f"class {int(classes[j])} outside 0..{k - 1}" if bad_class[j] else
               "no area (needs x0 < x1 and y0 < y1)" if no_area[j] else "wholly outside its image")
        problems.append((int(owner[j]), f"box {int(j - off[owner[j]])} {box}: {why}"))
    return problems
