"""feedline/train/evaluate.py: validation loss, top-1 and top-5 against values worked by hand,
over batches of uneven size, with the true class exactly 5th (a top-5 hit) and 6th (a miss),
and with fewer than five classes (top-5 is then top-k over them all)."""
from __future__ import annotations

import math

import pytest
import torch

from feedline.train.distributed import DistInfo
from feedline.train.evaluate import evaluate
from feedline.train.step import Amp


def cross_entropy(row: list[float], label: int) -> float:
    return math.log(sum(math.exp(v) for v in row)) - row[label]


def batches(rows: list[list[float]], labels: list[int], sizes: list[int]):
    """The logits themselves as 'images' (B, C, 1, 1), cut into batches of ``sizes``: the model
    under evaluation flattens them back, so the logits are known exactly."""
    out, start = [], 0
    for n in sizes:
        images = torch.tensor(rows[start:start + n]).reshape(n, -1, 1, 1)
        out.append((images, torch.tensor(labels[start:start + n])))
        start += n
    return out


def run(rows, labels, sizes, num_classes):
    model = torch.nn.Flatten()
    result = evaluate(model, batches(rows, labels, sizes), Amp("cpu", None), torch.device("cpu"), DistInfo(),
                      num_classes)
    assert model.training   # left in training mode for the next epoch
    return result


def test_top1_top5_and_the_loss_worked_by_hand():
    ranked = [5.0, 4.0, 3.0, 2.0, 1.0, 0.0]   # class c ranks c + 1
    rows = [ranked, ranked, ranked, [0.0, 0.0, 0.0, 0.0, 0.0, 9.0]]
    labels = [0, 4, 5, 5]                     # 1st: top-1; 5th: top-5 only; 6th: neither; 1st again
    got = run(rows, labels, [3, 1], num_classes=6)
    assert got["val_images"] == 4
    assert got["top1"] == pytest.approx(2 / 4) and got["top5"] == pytest.approx(3 / 4)
    want = sum(cross_entropy(r, y) for r, y in zip(rows, labels)) / 4
    assert got["val_loss"] == pytest.approx(want, rel=1e-6)


def test_with_fewer_than_five_classes_top5_counts_every_class():
    rows = [[2.0, 1.0, 0.0], [0.0, 1.0, 2.0], [1.0, 3.0, 2.0]]
    labels = [0, 0, 2]                        # ranks 1, 3 and 2 of 3
    got = run(rows, labels, [1, 1, 1], num_classes=3)
    assert (got["top1"], got["top5"], got["val_images"]) == (pytest.approx(1 / 3), 1.0, 3)
    assert got["val_loss"] == pytest.approx(sum(cross_entropy(r, y) for r, y in zip(rows, labels)) / 3, rel=1e-6)
