"""The boxes kind's own rule for boxes and their images, by hand: the one rule that verify
applies and the pack applies as it packs (wholly outside: a problem; partly: clipped)."""
from __future__ import annotations

import numpy as np

from feedline.fields.boxes import Boxes

# Three records of 64 x 48 (width x height), and one whose size is unknown (-1).
SIZES = np.array([[48, 64], [48, 64], [48, 64], [-1, -1]])
COORDS = [[-100, -100, -10, -10],   # record 0: wholly outside, above and left
          [64, 10, 70, 20],         # record 0: starts at the right edge: nothing inside
          [10, 10, 5000, 5000],     # record 1: partly outside: clipped to (10, 10, 64, 48)
          [-5, 0, 20, 48],          # record 2: partly outside on the left: (0, 0, 20, 48)
          [1, 1, 63, 47],           # record 2: inside, unchanged
          [500, 500, 600, 600]]     # record 3: size unknown, left alone


def columns():
    return {"box_offsets": np.array([0, 2, 3, 5, 6]), "box_coords": np.array(COORDS, dtype=np.float32).reshape(-1),
            "box_classes": np.array([0, 1, 0, 1, 0, 0], dtype=np.int32)}


def test_a_box_wholly_outside_its_image_is_a_problem_and_one_partly_outside_is_not():
    problems = Boxes({"max": 2}, ["car", "dog"]).problems(columns(), 4, SIZES)
    assert problems == [(0, "box 0 [-100.0, -100.0, -10.0, -10.0, 0]: wholly outside its 64x48 (WxH) image"),
                        (0, "box 1 [64.0, 10.0, 70.0, 20.0, 1]: wholly outside its 64x48 (WxH) image")]


def test_a_box_partly_outside_is_clipped_to_its_image_and_counted():
    a = columns()
    a["box_coords"] = a["box_coords"].reshape(-1, 4)[2:].reshape(-1)   # the boxes that pass
    a["box_offsets"], a["box_classes"] = np.array([0, 0, 1, 3, 4]), a["box_classes"][2:]
    fitted, changed = Boxes({"max": 2}, ["car", "dog"]).fit(a, 4, SIZES)
    assert changed == 2
    assert fitted["box_coords"].reshape(-1, 4).tolist() == [[10, 10, 64, 48], [0, 0, 20, 48], [1, 1, 63, 47],
                                                            [500, 500, 600, 600]]


def test_a_class_outside_the_fields_own_list_is_a_problem():
    problems = Boxes({"max": 2}, ["car"]).problems(columns(), 4, None)   # no sizes: classes and areas only
    assert [(i, p.split(": ")[1]) for i, p in problems] == [(0, "class 1 outside 0..0"), (2, "class 1 outside 0..0")]
