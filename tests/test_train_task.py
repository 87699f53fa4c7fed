"""feedline/train/task.py: --val is checked against what the run learns, for each task: a
classifier's --val needs TRAIN's label classes; a multi-label run's, the labels field and its
class list (whatever its label field says); a regression's, a target of the same width. Real
packs of photo crops; each refusal is one line naming both files and what differs."""
from __future__ import annotations

import pytest
from test_train_helpers import FAST, events, one_line_error, run, two_class_folder
from test_train_targets import labelled_pack, multi_hot, number, several

from feedline import open_dataset
from feedline.train.config import TrainError
from feedline.train.task import CLASSIFY, MULTI_LABEL, REGRESSION, Task, check_val, choose_task


def other_hot(c: str) -> dict:   # the same number of classes as multi_hot, one other name
    return {"labels": ["indoor", c] + (["green"] if c == "grass" else [])}


def fewer_hot(c: str) -> dict:   # outdoor on every image, green on none
    return {"labels": ["outdoor", c]}


VALS = {   # name -> labels-file row of each class
    "label": lambda c: {"label": c},
    "labels": multi_hot,
    "other_labels": other_hot,
    "fewer_labels": fewer_hot,
    "two_new_labels": lambda c: {"labels": ["indoor", "sky", c]},
    "labels_two_each": lambda c: {"labels": {"grass": ["green", "grass"], "rocket": ["outdoor", "rocket"]}[c]},
    "label_and_other_labels": lambda c: {"label": c, **other_hot(c)},
    "target": number,
    "target_list": lambda c: {"target": [number(c)["target"]]},
    "target_pair": lambda c: {"target": [1.0, 2.0]},
    "other_label_names": lambda c: {"label": {"grass": "lawn", "rocket": "rocket"}[c]},
    "several": several,
}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("task")
    made = {"train_several": labelled_pack(root, "train_several", 3, 1, several, "lmdb"),
            "train_target": labelled_pack(root, "train_target", 3, 1, number, "lmdb"),
            "train_labels": labelled_pack(root, "train_labels", 3, 1, multi_hot, "lmdb"),
            "train_boxes": labelled_pack(root, "train_boxes", 2, 1, lambda c: {"boxes": [[1, 1, 20, 20, c]]}, "lmdb")}
    for name, row in VALS.items():
        made[name] = labelled_pack(root, name, 2, 2, row, "h5")
    flat = two_class_folder(root / "flat_src", 2, seed=3, classes=("grass",))
    made["flat"] = str(flat / "grass")   # an image folder without class folders: one class
    return made


def checked(stores, train: str, val: str, task: Task, num_classes: int = 2) -> None:
    with open_dataset(stores[train]) as t, open_dataset(stores[val]) as v:
        check_val(v, t, task, num_classes)


def refusal(stores, train: str, val: str, task: Task, num_classes: int = 2) -> str:
    with pytest.raises(TrainError) as err:
        checked(stores, train, val, task, num_classes)
    return str(err.value)


CLASSES, LABELS, TARGET = Task(CLASSIFY, "label", 2), Task(MULTI_LABEL, "labels", 4), Task(REGRESSION, "target", 1)


@pytest.mark.parametrize("train, val, task", [
    ("train_several", "label", CLASSES), ("train_several", "several", CLASSES),
    ("train_several", "labels", LABELS),                 # no label field: the run does not learn it
    ("train_labels", "labels", LABELS), ("train_several", "several", LABELS),
    ("train_labels", "labels_two_each", LABELS),         # the same class list, at most 2 per image, not 3
    ("train_several", "target", TARGET), ("train_target", "target", TARGET),   # no classes at all
    ("train_target", "target_list", TARGET),             # [x] and x: one number per image either way
])
def test_a_val_that_holds_what_the_run_learns_is_accepted(stores, train, val, task):
    checked(stores, train, val, task)


def test_a_classifiers_val_needs_the_label_and_its_classes(stores):
    v, t = stores["labels"], stores["train_several"]
    assert refusal(stores, "train_several", "labels", CLASSES) == (
        f"--val {v} holds labels, but the run learns label from TRAIN {t}: pack --val with a label "
        "column (or class folders) too")
    assert refusal(stores, "train_several", "flat", CLASSES) == (
        f"--val {stores['flat']} has no labels (one class, 'grass', for all 2 images); lay it out as TRAIN is, "
        "one folder per class, or pass a labels CSV when packing it")
    assert refusal(stores, "train_several", "other_label_names", CLASSES) == (
        f"--val {stores['other_label_names']} has other label classes than TRAIN {t}: lawn is not in TRAIN, "
        "grass of TRAIN is not in --val; pack both with the same classes (class folders or names)")


def test_a_multi_label_val_needs_the_labels_field_and_its_class_list(stores):
    t = stores["train_several"]
    assert refusal(stores, "train_several", "label", LABELS) == (
        f"--val {stores['label']} holds label, but the run learns labels from TRAIN {t}: pack --val with a "
        "labels column too")
    for val, differs in [("label_and_other_labels", "indoor is not in TRAIN, outdoor of TRAIN is not in --val"),
                         ("other_labels", "indoor is not in TRAIN, outdoor of TRAIN is not in --val"),
                         ("fewer_labels", "green of TRAIN is not in --val"),
                         ("two_new_labels", "indoor is not in TRAIN, green of TRAIN is not in --val")]:
        assert refusal(stores, "train_several", val, LABELS) == (
            f"--val {stores[val]} has other labels classes than TRAIN {t}: {differs}; pack both with the same "
            "classes (class folders or names)")


def test_a_regressions_val_needs_a_target_of_the_same_width(stores):
    t = stores["train_target"]
    assert refusal(stores, "train_target", "label", TARGET) == (
        f"--val {stores['label']} holds label, but the run learns target from TRAIN {t}: pack --val with a "
        "target column too")
    assert refusal(stores, "train_target", "target_pair", TARGET) == (
        f"--val {stores['target_pair']} has 2 target numbers per image, TRAIN {t} has 1: pack both from "
        "labels files with the same target column")


def test_a_classifiers_val_label_beyond_the_models_classes_is_refused(stores):
    """--num-classes may widen the model past TRAIN's classes, never narrow it below a val label."""
    t = stores["train_several"]
    assert refusal(stores, "train_several", "label", CLASSES, num_classes=1) == (
        f"--val {stores['label']} has label 1, beyond the 1 classes of TRAIN {t}; pack both with the same classes")


@pytest.mark.parametrize("task, val, metric", [("multilabel", "labels", "mAP"), ("regress", "target", "mae")])
def test_a_run_validates_on_a_store_of_its_field_alone(stores, tmp_path, task, val, metric):
    """TRAIN holds label, labels and target; --task multilabel (regress) with a --val of labels
    (target) alone, whose label classes are not TRAIN's (it has none), trains and reports."""
    out = tmp_path / "run"
    assert run([stores["train_several"], "--val", stores[val], "--task", task, *FAST,
                "--batch-size", "4", "--epochs", "1", "--synthetic-steps", "0", "--out", out]) == 0
    last = events(out, "epoch")[-1]
    assert last["val_images"] == 4 and last[metric] >= 0 and "top1" not in last


def test_a_regression_run_with_a_val_of_no_classes_says_what_is_wrong_in_one_line(stores, capsys, tmp_path):
    """A --val that holds target alone (no class list at all) against a classifier's TRAIN: one
    line, not an IndexError."""
    err = one_line_error(capsys, [stores["train_several"], "--val", stores["target"], "--task", "classify", *FAST,
                                  "--batch-size", "4", "--epochs", "1", "--out", tmp_path / "run"])
    assert f"--val {stores['target']} holds target, but the run learns label" in err


def test_choose_task_by_hand(stores):
    """No store (--synthetic): classes; two learnable fields are as ambiguous as three; a task
    the store cannot serve names what it needs and what the store offers, or what to do."""
    assert choose_task(None, 7) == Task(CLASSIFY, "label", 7)
    with open_dataset(stores["label_and_other_labels"]) as two:
        with pytest.raises(TrainError) as err:
            choose_task(two, 2)
        assert str(err.value) == (f"{two.filename} holds label, labels: say which to learn with --task classify "
                                  "(label), --task multilabel (labels)")
    with open_dataset(stores["train_target"]) as target:
        with pytest.raises(TrainError) as err:
            choose_task(target, 0, "classify")
        assert str(err.value) == (f"{target.filename} holds only target: the trainer trains classifiers (label or "
                                  "labels), regressors (target) and segmenters (mask); --task classify needs label; this store offers "
                                  "--task regress (target)")
    with open_dataset(stores["train_boxes"]) as boxes:
        with pytest.raises(TrainError) as err:
            choose_task(boxes, 2)
        assert str(err.value) == (f"{boxes.filename} holds only boxes: the trainer trains classifiers (label or "
                                  "labels), regressors (target) and segmenters (mask); read boxes or keypoints in your own loop (README: "
                                  "a detection-style loop), or pack a label column too")
