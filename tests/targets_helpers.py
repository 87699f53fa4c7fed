"""A labelled photo folder with every field, and the oracle of one delivered row: what a
sample's targets must be, written from the record's plain targets (``Store.targets``) and its
crop, with boxes through `feedline.dataset.box_geometry.transform_boxes` (itself checked by hand in test_boxes)
and keypoints through `feedline.fields.keypoints.to_output` (by hand in test_fields_keypoints)."""
from __future__ import annotations

import json
import os

import numpy as np

from feedline.planning.augment import plan as plan_augment
from feedline.dataset.box_geometry import transform_boxes
from feedline.fields.keypoints import to_output
from feedline.sample import make_photo_folder

NAMES = ["cat", "dog", "emu", "fox"]


def labelled_folder(root, n: int = 12, fields=("label", "labels", "target", "boxes", "keypoints"),
                    listed_target: bool | None = None) -> tuple[str, str]:
    """(image folder, JSON Lines labels file): ``label`` is the record's own id (``id00`` ..),
    so a delivered row says which record it is; boxes lie partly outside most crops; ``target``
    is 3 numbers (``listed_target``, by default with a label) or one."""
    listed_target = "label" in fields if listed_target is None else listed_target
    src = os.path.join(root, "src")
    make_photo_folder(src, n=n, classes=2, seed=7, sizes=[(96, 128), (128, 96), (80, 80)])
    rels = sorted(os.path.relpath(os.path.join(d, f), src) for d, _, fs in os.walk(src) for f in fs)
    rng = np.random.default_rng(3)
    rows = []
    for k, rel in enumerate(rels):
        row = {"path": rel}
        if "label" in fields:
            row["label"] = f"id{k:02d}"
        if "labels" in fields:
            row["labels"] = [NAMES[(k + j) % 4] for j in range(1 + k % 3)]
        if "target" in fields:
            row["target"] = [k / 4, -k, 0.5] if listed_target else k / 8
        if "boxes" in fields:
            boxes = []
            for j in range(k % 5):
                x0, y0 = rng.uniform(0, 70, size=2)
                boxes.append([round(x0, 2), round(y0, 2), round(x0 + rng.uniform(4, 50), 2),
                              round(y0 + rng.uniform(4, 50), 2), f"id{j:02d}"])
            row["boxes"] = boxes
        if "keypoints" in fields:   # inside every image (80 pixels at least each way), some not labelled
            row["keypoints"] = [[round(float(x), 2), round(float(y), 2), (k + j) % 3]
                                for j, (x, y) in enumerate(rng.uniform(0, 80, size=(2, 2)))]
        rows.append(row)
    path = os.path.join(root, "labels.jsonl")
    with open(path, "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    return src, path


def expected_row(store, record: int, spec, seed: int, epoch: int, min_visibility: float = 0.25) -> dict:
    """Record ``record``'s targets as a batch row, numpy, by hand."""
    want, out = store.targets(record), {}
    if "label" in want:
        out["label"] = want["label"]
    if "labels" in want:
        hot = np.zeros(len(store.class_lists["labels"]), dtype=np.float32)   # its own list
        hot[want["labels"]] = 1
        out["labels"] = hot
    if "target" in want:
        out["target"] = np.asarray(want["target"], dtype=np.float32)
    h, w = store.size(record)
    crops, flips = plan_augment(spec, seed, epoch, [record], [h], [w])
    if "keypoints" in want:
        out["keypoints"] = to_output([want["keypoints"]], crops, flips, spec.size)[0]
    if "boxes" in want:
        boxes = np.array([b[:4] for b in want["boxes"]], dtype=np.float64).reshape(-1, 4)
        kept, which = transform_boxes(boxes, crops[0], bool(flips[0]), spec.size, min_visibility)
        out["boxes"] = kept
        out["box_classes"] = np.array([b[4] for b in want["boxes"]], dtype=np.int64).reshape(-1)[which]
    return out


def check_row(got: dict, row: int, want: dict, max_boxes: int) -> None:
    """Row ``row`` of a delivered dict batch equals the oracle row ``want``."""
    if "label" in want:
        assert int(got["label"][row]) == want["label"]
    if "labels" in want:
        np.testing.assert_array_equal(got["labels"][row].numpy(), want["labels"])
    if "target" in want:
        np.testing.assert_allclose(got["target"][row].numpy(), want["target"], rtol=1e-6)
    if "keypoints" in want:
        np.testing.assert_allclose(got["keypoints"][row].numpy(), want["keypoints"], rtol=1e-5, atol=1e-4)
    if "boxes" in want:
        k = len(want["boxes"])
        assert int(got["box_counts"][row]) == k
        np.testing.assert_allclose(got["boxes"][row, :k].numpy(), want["boxes"], rtol=1e-5, atol=1e-4)
        assert got["box_classes"][row, :k].tolist() == want["box_classes"].tolist()
        assert got["box_classes"][row, k:].tolist() == [-1] * (max_boxes - k)
        assert not got["boxes"][row, k:].any()
