"""feedline/train/evaluate_targets.py: the validation of multi-label and regression runs against
values worked by hand: mean average precision with a tie, a score of exactly 1.0 (the top bin)
and a class with no positive (left out of the mean); the loss per number; the mean absolute
error and smooth L1 on both sides of its bend; targets as a tensor or in a dict, a scalar target
against (B, 1) outputs; and the dispatch of `validate` by task."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from feedline.train.distributed import DistInfo
from feedline.train.evaluate_targets import BINS, average_precision, evaluate_targets, validate
from feedline.train.step import Amp
from feedline.train.task import CLASSIFY, MULTI_LABEL, REGRESSION, FieldLoss, Task

LOGIT = {0.75: math.log(3.0), 0.5: 0.0, 0.25: -math.log(3.0), 1.0: 40.0}   # sigmoid(x) = the key (float32)


class Config:   # the two fields of TrainConfig that the criterion reads
    regression_loss = "smooth-l1"
    label_smoothing = 0.0


def evaluated(outputs: list[list[float]], targets, criterion: FieldLoss, sizes: list[int]) -> dict:
    """evaluate_targets over batches of ``sizes``; the model flattens its 'images', which are
    the outputs themselves."""
    out = torch.tensor(outputs, dtype=torch.float32)
    loader, start = [], 0
    for n in sizes:
        part = slice(start, start + n)
        y = {k: v[part] for k, v in targets.items()} if isinstance(targets, dict) else targets[part]
        loader.append((out[part].reshape(n, -1, 1, 1), y))
        start += n
    return evaluate_targets(torch.nn.Flatten(), loader, Amp("cpu", None), torch.device("cpu"), DistInfo(),
                            criterion, out.shape[1])


def bce(x: float, y: float) -> float:
    return math.log1p(math.exp(-abs(x))) + max(x, 0.0) - x * y


def test_mean_average_precision_worked_by_hand():
    """Per class, scores high to low (P positive, n negative), AP = mean over the positives of
    the precision at their rank; a tie is one threshold.
      class 0: 1.0 n, 0.75 P, 0.5 n, 0.25 P      -> (1/2 + 2/4) / 2 = 0.5
      class 1: 1.0 P, 0.75 n, 0.5 n, 0.25 P      -> (1 + 2/4) / 2 = 0.75
      class 2: 0.5 P, 0.5 n (tied), 0.25 P, 0.25 n -> 1/2 x 1/2 + 1/2 x 2/4 = 0.5
      class 3: no positive                        -> left out
    mAP = (0.5 + 0.75 + 0.5) / 3."""
    scores = [[1.0, 1.0, 0.5, 0.25], [0.75, 0.75, 0.5, 0.75], [0.5, 0.5, 0.25, 0.5], [0.25, 0.25, 0.25, 0.25]]
    truth = [[0, 1, 1, 0], [1, 0, 0, 0], [0, 0, 1, 0], [1, 1, 0, 0]]
    outputs = [[LOGIT[s] for s in row] for row in scores]
    got = evaluated(outputs, {"labels": torch.tensor(truth, dtype=torch.float32)},
                    FieldLoss(MULTI_LABEL, "labels"), sizes=[3, 1])
    assert got["mAP"] == pytest.approx((0.5 + 0.75 + 0.5) / 3, abs=1e-12)
    assert got["val_images"] == 4 and "mae" not in got
    want = sum(bce(x, y) for row, hot in zip(outputs, truth) for x, y in zip(row, hot)) / 16
    assert got["val_loss"] == pytest.approx(want, rel=1e-5)


def test_average_precision_of_no_positive_anywhere_is_nan_and_the_top_bin_holds_a_score_of_one():
    got = evaluated([[40.0], [0.0]], torch.tensor([[0.0], [0.0]]), FieldLoss(MULTI_LABEL, "labels"), sizes=[2])
    assert math.isnan(got["mAP"])
    positives, negatives = np.zeros((1, BINS)), np.zeros((1, BINS))
    positives[0, BINS - 1], negatives[0, BINS // 2] = 1, 1   # the score 1.0 in the last bin, above 0.5
    assert average_precision(positives, negatives)[0] == 1.0


@pytest.mark.parametrize("loss", ["mse", "smooth-l1"])
def test_regression_loss_per_number_and_the_mean_absolute_error(loss):
    """Two numbers per image, differences 0.5, -1.0 (smooth L1's bend: 0.5 either way), 3.0, 0.0."""
    outputs = [[1.5, -1.0], [5.0, 2.0]]
    target = torch.tensor([[1.0, 0.0], [2.0, 2.0]])
    diffs = [0.5, -1.0, 3.0, 0.0]
    got = evaluated(outputs, target, FieldLoss(REGRESSION, "target", regression_loss=loss), sizes=[1, 1])
    per = {"mse": lambda d: d * d, "smooth-l1": lambda d: 0.5 * d * d if abs(d) < 1 else abs(d) - 0.5}[loss]
    assert got["val_loss"] == pytest.approx(sum(per(d) for d in diffs) / 4)
    assert got["mae"] == pytest.approx(4.5 / 4) and got["val_images"] == 2 and "mAP" not in got


def test_a_scalar_target_against_outputs_of_width_one():
    got = evaluated([[2.0], [-1.0], [0.5]], {"target": torch.tensor([1.0, 1.0, 0.5])},
                    FieldLoss(REGRESSION, "target"), sizes=[2, 1])
    assert got["mae"] == pytest.approx((1.0 + 2.0 + 0.0) / 3)
    assert got["val_loss"] == pytest.approx((1.0 + 4.0 + 0.0) / 3) and got["val_images"] == 3


def test_validate_reports_each_tasks_own_figures():
    amp, info = Amp("cpu", None), DistInfo()
    images = torch.tensor([[3.0, 0.0], [0.0, 1.0]]).reshape(2, 2, 1, 1)
    classes = validate(torch.nn.Flatten(), [(images, torch.tensor([0, 0]))], amp, info, Task(CLASSIFY, "label", 2),
                       Config())
    assert set(classes) == {"val_loss", "top1", "top5", "val_images"} and classes["top1"] == 0.5
    hot = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    labels = validate(torch.nn.Flatten(), [(images, {"labels": hot})], amp, info, Task(MULTI_LABEL, "labels", 2),
                      Config())
    assert set(labels) == {"val_loss", "mAP", "val_images"} and labels["mAP"] == 1.0
    numbers = validate(torch.nn.Flatten(), [(images, {"target": hot})], amp, info, Task(REGRESSION, "target", 2),
                       Config())
    assert set(numbers) == {"val_loss", "mae", "val_images"}
    assert numbers["mae"] == pytest.approx((2.0 + 0.0 + 0.0 + 0.0) / 4)
    assert numbers["val_loss"] == pytest.approx((2.0 - 0.5) / 4)   # --regression-loss smooth-l1 reached it


def test_the_sums_over_batches_keep_every_unit():
    """Absolute errors of 2**24 and 1 in two batches: a float32 running sum would drop the 1."""
    got = evaluated([[2.0 ** 24], [1.0]], torch.tensor([0.0, 0.0]), FieldLoss(REGRESSION, "target"), sizes=[1, 1])
    assert got["mae"] == (2 ** 24 + 1) / 2
