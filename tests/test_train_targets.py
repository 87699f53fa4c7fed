"""The trainer learns the field a store holds: multi-label (BCE with logits, mAP) and
regression (MSE or smooth L1, MAE), on real photo packs, on the CPU; and its average precision
against a hand-written one over exact scores."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from test_train_helpers import (FAST, REPO, events, one_line_error, run, subprocess_env, summary, torchrun,
                                two_class_folder)
from test_train_helpers import restore_torch_globals  # noqa: F401 -- autouse: torch's globals put back

from converters import pack
from feedline import FeedLoader
from feedline.train import checkpoint
from feedline.train.evaluate_targets import BINS, average_precision
from feedline.train.models import build_model


def labelled_pack(root, name: str, per_class: int, seed: int, row, ext: str, drop: str | None = None) -> str:
    """The grass/rocket photos with a labels file of ``row(class_name) -> dict``, packed
    (without the photo ``drop``, a path under the folder, when given)."""
    src = two_class_folder(root / f"{name}_src", per_class, seed=seed)
    if drop is not None:
        os.remove(src / drop)
    lines = [json.dumps({"path": f"{c}/{f}", **row(c)}) for c in ("grass", "rocket")
             for f in sorted(os.listdir(src / c))]
    labels = root / f"{name}.jsonl"
    labels.write_text("\n".join(lines) + "\n")
    out = str(root / f"{name}.{ext}")
    pack(str(src), out, labels_csv=str(labels), progress=False)
    return out


def multi_hot(c: str) -> dict:
    return {"labels": ["outdoor", c] + (["green"] if c == "grass" else [])}


def number(c: str) -> dict:
    return {"target": 1.0 if c == "grass" else -1.0}


def test_a_multi_label_store_trains_with_bce_and_reports_map(tmp_path):
    train = labelled_pack(tmp_path, "train", 48, 1, multi_hot, "lmdb")
    val = labelled_pack(tmp_path, "val", 16, 2, multi_hot, "h5")
    out = tmp_path / "run"
    assert run([train, "--val", val, *FAST, "--epochs", "4", "--lr", "0.2", "--synthetic-steps", "2",
                "--out", out]) == 0
    epochs = events(out, "epoch")
    start = events(out, "start")[0]
    assert start["num_classes"] == 4   # green, grass, outdoor, rocket: one output each
    assert epochs[-1]["train_loss"] < epochs[0]["train_loss"]
    assert epochs[-1]["mAP"] > 0.9 and epochs[-1]["val_images"] == 32 and "top1" not in epochs[-1]


@pytest.mark.parametrize("loss", ["mse", "smooth-l1"])
def test_a_regression_store_trains_and_reports_the_mae(tmp_path, loss):
    train = labelled_pack(tmp_path, "train", 48, 1, number, "lmdb")
    val = labelled_pack(tmp_path, "val", 16, 2, number, "lmdb")
    out = tmp_path / "run"
    # classical momentum and a short warmup: at this lr Nesterov's first steps overshoot the toy regression
    assert run([train, "--val", val, *FAST, "--epochs", "4", "--warmup-epochs", "1", "--opt", "momentum", "--lr", "0.05",
                "--synthetic-steps", "0", "--regression-loss", loss, "--out", out]) == 0
    epochs = events(out, "epoch")
    assert events(out, "start")[0]["num_classes"] == 1
    assert epochs[-1]["train_loss"] < epochs[0]["train_loss"]
    assert epochs[-1]["mae"] < 0.6 and epochs[-1]["val_images"] == 32   # always guessing 0 scores 1.0


def test_a_store_of_boxes_alone_is_refused_in_one_line(tmp_path, capsys):
    train = labelled_pack(tmp_path, "train", 8, 1, lambda c: {"boxes": [[1, 1, 20, 20, c]]}, "lmdb")
    err = one_line_error(capsys, [train, *FAST, "--epochs", "1", "--out", tmp_path / "run"])
    assert "holds only boxes" in err and "detection-style loop" in err


def several(c: str) -> dict:
    return {"label": c, **multi_hot(c), **number(c), "boxes": [[1, 1, 20, 20, "sky"]]}


def test_a_store_of_several_fields_is_refused_until_task_names_one(tmp_path, capsys):
    train = labelled_pack(tmp_path, "train", 8, 1, several, "lmdb")
    err = one_line_error(capsys, [train, *FAST, "--epochs", "1", "--out", tmp_path / "run"])
    assert "holds label, labels, target" in err
    assert "--task classify (label), --task multilabel (labels), --task regress (target)" in err


def test_task_picks_the_field_and_its_own_class_list(tmp_path):
    from feedline import open_dataset
    from feedline.train.task import CLASSIFY, MULTI_LABEL, REGRESSION, Task, choose_task
    train = labelled_pack(tmp_path, "train", 4, 1, several, "lmdb")
    with open_dataset(train) as store:
        assert store.class_lists == {"label": ["grass", "rocket"], "labels": ["grass", "green", "outdoor", "rocket"],
                                     "boxes": ["sky"]}
        assert choose_task(store, 2, "classify") == Task(CLASSIFY, "label", 2)
        assert choose_task(store, 2, "multilabel") == Task(MULTI_LABEL, "labels", 4)   # its own list, not label's
        assert choose_task(store, 2, "regress") == Task(REGRESSION, "target", 1)
    alone = labelled_pack(tmp_path, "alone", 4, 1, lambda c: {**multi_hot(c), "boxes": [[1, 1, 20, 20, "sky"]]},
                          "lmdb")
    with open_dataset(alone) as store:
        assert choose_task(store, 4, "auto") == Task(MULTI_LABEL, "labels", 4)   # one learnable field: no question
        with pytest.raises(Exception, match="--task regress needs target; this store offers --task multilabel"):
            choose_task(store, 4, "regress")


def exact_average_precision(scores: np.ndarray, positive: np.ndarray) -> float:
    """sklearn's definition written out: over thresholds at each distinct score, high to low,
    sum of (recall gained) x (precision at that threshold)."""
    ap, total = 0.0, positive.sum()
    for t in sorted(set(scores.tolist()), reverse=True):
        above = scores >= t
        gained = (positive & (scores == t)).sum() / total
        ap += gained * (positive & above).sum() / above.sum()
    return ap


def test_average_precision_from_histograms_equals_the_exact_one():
    rng = np.random.default_rng(0)
    k, n = 5, 400
    positive = rng.random((n, k)) < [0.05, 0.2, 0.5, 0.8, 0.3]
    scores = np.clip(rng.normal(positive * 0.3 + 0.3, 0.2), 0, 0.9999)
    scores = np.floor(scores * BINS) / BINS + 0.5 / BINS     # one score per bin: the histogram is exact
    bins = (scores * BINS).astype(int) + np.arange(k) * BINS
    pos = np.bincount(bins[positive], minlength=k * BINS).reshape(k, BINS)
    neg = np.bincount(bins[~positive], minlength=k * BINS).reshape(k, BINS)
    got = average_precision(pos, neg)
    want = [exact_average_precision(scores[:, c], positive[:, c]) for c in range(k)]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert np.isnan(average_precision(np.zeros((1, BINS)), np.ones((1, BINS))))[0]


@pytest.mark.slow
def test_two_ranks_report_the_map_of_a_one_process_evaluation(tmp_path):
    """31 validation images over two ranks: each counted once, and loss and mAP equal an
    evaluation of the saved weights in this process, AP written out by hand (exact scores)."""
    import subprocess
    train = labelled_pack(tmp_path, "train", 48, 1, multi_hot, "lmdb")
    val = labelled_pack(tmp_path, "val", 16, 2, multi_hot, "h5", drop="rocket/015.jpg")
    out = tmp_path / "run"
    cmd = torchrun(train, "--val", val, *FAST, "--batch-size", "8", "--epochs", "1", "--lr", "0.1",
                   "--synthetic-steps", "0", "--out", out)
    done = subprocess.run(cmd, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    final = summary(out)["final"]
    assert final["val_images"] == 31
    model = build_model("tiny", num_classes=4)
    model.load_state_dict(checkpoint.load(os.path.join(out, "checkpoint.pt"))["model"])
    model.eval()
    scores, truth, loss = [], [], 0.0
    with FeedLoader(val, batch_size=5, train=False, size=32, num_workers=1, device="cpu") as loader, \
            torch.no_grad():
        for images, hot in loader:
            logits = model(images)
            loss += torch.nn.functional.binary_cross_entropy_with_logits(logits, hot, reduction="sum").item()
            scores.append(torch.sigmoid(logits).numpy())
            truth.append(hot.numpy() > 0.5)
    scores, truth = np.concatenate(scores), np.concatenate(truth)
    assert final["val_loss"] == pytest.approx(loss / truth.size, rel=1e-4)
    want = np.mean([exact_average_precision(scores[:, c], truth[:, c]) for c in range(4) if truth[:, c].any()])
    assert final["mAP"] == pytest.approx(want, abs=0.01)
