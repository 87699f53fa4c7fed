"""What the trainer learns, chosen from the training store's fields by ``--task``: one class
per image (``classify``, a ``label`` field: cross-entropy, top-1/top-5), several (``multilabel``,
``labels``: binary cross-entropy on each logit, mean average precision) or numbers (``regress``,
``target``: MSE or smooth L1, mean absolute error) or a class per pixel (``segment``, ``mask``:
cross-entropy over the pixels but those of ``IGNORE_INDEX``, mean IoU). Each field kind says which task it serves
(`feedline.fields`); a store with one such field trains it, a store with several is refused
until ``--task`` names one (the trainer does not guess). Boxes and keypoints are for your own
loop (README: "a detection-style loop")."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..fields import KINDS
from .choices import TaskChoice
from .config import TrainError

CLASSIFY, MULTI_LABEL, REGRESSION, SEGMENTATION = "classification", "multi-label", "regression", "segmentation"
KIND_OF_TASK = {TaskChoice.CLASSIFY: CLASSIFY, TaskChoice.MULTILABEL: MULTI_LABEL, TaskChoice.REGRESS: REGRESSION,
                TaskChoice.SEGMENT: SEGMENTATION}
IGNORE_INDEX = 255   # the loader's default: pixels outside the image, erased, or marked so in the masks


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
        if self.kind == SEGMENTATION:   # (N, C, H, W) scores against (N, H, W) classes
            return F.cross_entropy(outputs.float(), y.long(), ignore_index=IGNORE_INDEX,
                                   label_smoothing=self.label_smoothing, reduction=reduction)
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


def choose_task(train, num_classes: int, wanted: TaskChoice | str = TaskChoice.AUTO) -> Task:
    """The task ``wanted`` (``--task``) of the fields of ``train`` (a Store; None with --synthetic)."""
    wanted = TaskChoice(wanted)
    if train is None:
        return Task(CLASSIFY, "label", num_classes)
    fields = train.target_columns.kinds
    learnable = {f.task: f for f in fields.values() if f.task is not None}
    choices = ", ".join(f"--task {task} ({f.name})" for task, f in learnable.items())
    if wanted is TaskChoice.AUTO and len(learnable) > 1:
        raise TrainError(f"{train.filename} holds {', '.join(f.name for f in learnable.values())}: say which "
                         f"to learn with {choices}")
    if wanted is TaskChoice.AUTO and learnable:
        wanted = TaskChoice(next(iter(learnable)))
    if wanted.value not in learnable:
        kinds = ", ".join(k.name for k in KINDS.values() if k.task == wanted.value)
        raise TrainError(f"{train.filename} holds only {', '.join(fields)}: the trainer trains classifiers "
                         f"(label or labels), regressors (target) and segmenters (mask)"
                         + (f"; --task {wanted.value} needs {kinds}" if kinds else "")
                         + (f"; this store offers {choices}" if learnable else
                            "; read boxes or keypoints in your own loop (README: a detection-style loop), or "
                            "pack a label column too"))
    f = learnable[wanted.value]
    if wanted is TaskChoice.SEGMENT:
        outputs = f.classes_beside(IGNORE_INDEX)
        if outputs < 1:
            raise TrainError(f"{train.filename}: its masks hold no class but {IGNORE_INDEX} (ignored): nothing to learn")
        return Task(SEGMENTATION, f.name, outputs)
    return Task(KIND_OF_TASK[wanted], f.name, num_classes if wanted is TaskChoice.CLASSIFY else f.outputs())


def task_of(data, task_choice: TaskChoice | str = TaskChoice.AUTO) -> Task:
    """The task of a run's Data (train.data), checked against --val; ``data.num_classes``
    becomes the model's output width."""
    task = choose_task(data.train, data.num_classes, task_choice)
    check_val(data.val, data.train, task, data.num_classes)
    data.num_classes = task.outputs
    return task


def check_val(val, train, task: Task, num_classes: int) -> None:
    """--val must hold the field the run learns, as TRAIN holds it: a classifier's label with
    TRAIN's classes (more than one), a multi-label run's labels with TRAIN's class list, a
    regression's target with as many numbers per image. Other fields (a label beside labels)
    are not the run's business."""
    if val is None:
        return
    name, field = f"--val {val.filename}", task.field
    if field not in val.fields:
        how = "a label column (or class folders)" if task.kind == CLASSIFY else f"a {field} column"
        raise TrainError(f"{name} holds {', '.join(val.fields)}, but the run learns {field} from TRAIN "
                         f"{train.filename}: pack --val with {how} too")
    if task.kind == SEGMENTATION:
        theirs = val.target_columns.kinds[field].classes_beside(IGNORE_INDEX)
        if theirs > task.outputs:
            raise TrainError(f"{name}'s masks hold classes up to {theirs - 1}, beyond the {task.outputs} of TRAIN "
                             f"{train.filename}'s: pack both with the same classes")
        return
    if task.kind == REGRESSION:
        mine, theirs = train.fields[field].get("width", 1), val.fields[field].get("width", 1)
        if mine != theirs:
            raise TrainError(f"{name} has {theirs} target numbers per image, TRAIN {train.filename} has {mine}: "
                             "pack both from labels files with the same target column")
        return
    mine, theirs = train.class_lists.get(field, []), val.class_lists.get(field, [])
    if task.kind == CLASSIFY and len(theirs) <= 1 < len(mine):
        raise TrainError(f"{name} has no labels (one class, {theirs[0] if theirs else None!r}, for all {len(val)} "
                         "images); lay it out as TRAIN is, one folder per class, or pass a labels CSV when packing it")
    if mine != theirs:
        raise TrainError(f"{name} has other {field} classes than TRAIN {train.filename}: {_differences(mine, theirs)}; "
                         "pack both with the same classes (class folders or names)")
    if task.kind == CLASSIFY and len(val.labels) and int(val.labels.max()) >= num_classes:
        raise TrainError(f"{name} has label {int(val.labels.max())}, beyond the {num_classes} classes of TRAIN "
                         f"{train.filename}; pack both with the same classes")


def _differences(mine: list[str], theirs: list[str]) -> str:
    """The first class --val has that TRAIN lacks, and the first TRAIN has that --val lacks."""
    extra = [c for c in theirs if c not in mine]
    missing = [c for c in mine if c not in theirs]
    said = [f"{c} is not in TRAIN" for c in extra[:1]] + [f"{c} of TRAIN is not in --val" for c in missing[:1]]
    return ", ".join(said) or "the same classes in another order"
