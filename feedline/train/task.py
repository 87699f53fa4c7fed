"""What the trainer learns, chosen from the training store's fields: one class per image
(``label``: cross-entropy, top-1/top-5), several (``labels``: binary cross-entropy on each
logit, mean average precision) or numbers (``target``: MSE or smooth L1, mean absolute error).
A store with ``label`` trains as it always did, whatever else it holds; boxes alone are for
your own loop (README: "a detection-style loop")."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import TrainError

CLASSIFY, MULTI_LABEL, REGRESSION = "classification", "multi-label", "regression"


class FieldLoss(nn.Module):
    """``loss(outputs, targets)`` on one field of a batch's targets (a tensor, or a dict of them).
    Classification: cross-entropy with label smoothing on int labels; on a mixer's probability
    targets (already smoothed by the mixer) timm's SoftTargetCrossEntropy, -sum(p * log_softmax(x))."""

    def __init__(self, kind: str, field: str, regression_loss: str = "mse", label_smoothing: float = 0.0):
        super().__init__()
        self.kind, self.field = kind, field
        self.regression_loss, self.label_smoothing = regression_loss, label_smoothing

    def pick(self, targets) -> torch.Tensor:
        return targets[self.field] if isinstance(targets, dict) else targets

    def forward(self, outputs: torch.Tensor, targets, reduction: str = "mean") -> torch.Tensor:
        y = self.pick(targets)
        if self.kind == CLASSIFY and y.is_floating_point():   # mixed: smoothed once, by the mixer
            per_sample = torch.sum(-y * F.log_softmax(outputs.float(), dim=-1), dim=-1)
            return per_sample.sum() if reduction == "sum" else per_sample.mean() if reduction == "mean" else per_sample
        if self.kind == CLASSIFY:
            return F.cross_entropy(outputs, y, label_smoothing=self.label_smoothing, reduction=reduction)
        outputs = outputs.float().reshape(y.shape)   # a scalar target: (B, 1) outputs against (B,)
        if self.kind == MULTI_LABEL:
            return F.binary_cross_entropy_with_logits(outputs, y, reduction=reduction)
        if self.regression_loss == "smooth-l1":
            return F.smooth_l1_loss(outputs, y, reduction=reduction)
        return F.mse_loss(outputs, y, reduction=reduction)


@dataclass(frozen=True)
class Task:
    kind: str
    field: str
    outputs: int          # the model's output width: classes, or the target's numbers

    def criterion(self, cfg) -> FieldLoss:
        return FieldLoss(self.kind, self.field, str(cfg.regression_loss), cfg.label_smoothing)


def choose_task(train, num_classes: int) -> Task:
    """The task the fields of ``train`` (a Store; None with --synthetic) call for."""
    fields = {"label": {}} if train is None else train.fields
    if "label" in fields:
        return Task(CLASSIFY, "label", num_classes)
    if "labels" in fields:
        return Task(MULTI_LABEL, "labels", len(train.classes))
    if "target" in fields:
        return Task(REGRESSION, "target", fields["target"]["width"])
    raise TrainError(f"{train.filename} holds only boxes: the trainer trains classifiers (label or labels) "
                     "and regressors (target); read the boxes in your own loop (README: a detection-style "
                     "loop), or pack a label column too")


def task_of(data) -> Task:
    """The task of a run's Data (train.data), checked against --val; ``data.num_classes``
    becomes the model's output width."""
    task = choose_task(data.train, data.num_classes)
    check_val_fields(data.val, data.train, task)
    data.num_classes = task.outputs
    return task


def check_val_fields(val, train, task: Task) -> None:
    """--val must hold the field the run learns, with the same width."""
    if val is None or task.kind == CLASSIFY:
        return
    if task.field not in val.fields or val.fields[task.field] != train.fields[task.field] and task.kind == REGRESSION:
        raise TrainError(f"--val {val.filename} has fields {sorted(val.fields)}, but the run learns "
                         f"{task.field!r} {train.fields[task.field]} from TRAIN {train.filename}: pack "
                         f"both from labels files with the same {task.field!r} column")
    if task.kind == MULTI_LABEL and val.classes != train.classes:
        raise TrainError(f"--val {val.filename} has other classes than TRAIN {train.filename}: "
                         f"{len(val.classes)} vs {len(train.classes)}; pack both with the same class names")
