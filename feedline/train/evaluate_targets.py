"""Validation of multi-label and regression runs, every image once over all ranks, like
evaluate.py: loss and mean average precision (multi-label), loss and mean absolute error
(regression). Average precision is computed from per-class histograms of the scores (summed
over ranks, so no rank gathers every prediction): scores tied within 1/BINS count as one
threshold, as sklearn counts equal scores."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .distributed import DistInfo, all_reduce_sum, broadcast_buffers
from .step import Amp
from .evaluate import evaluate
from .evaluate_segment import evaluate_segmentation
from .task import CLASSIFY, MULTI_LABEL, SEGMENTATION, FieldLoss, Task

BINS = 1000


def average_precision(positives: np.ndarray, negatives: np.ndarray) -> np.ndarray:
    """Per class (rows), from counts per score bin (columns, low to high): the area under the
    precision-recall steps, sum over thresholds of (new recall) x precision. NaN for a
    class without positives."""
    tp = np.cumsum(positives[:, ::-1], axis=1)
    fp = np.cumsum(negatives[:, ::-1], axis=1)
    total = tp[:, -1:]
    precision = np.divide(tp, tp + fp, out=np.zeros_like(tp, dtype=np.float64), where=(tp + fp) > 0)
    gained = positives[:, ::-1] / np.where(total > 0, total, 1)
    ap = (gained * precision).sum(axis=1)
    return np.where(total[:, 0] > 0, ap, np.nan)


def evaluate_targets(model: nn.Module, loader, amp: Amp, device: torch.device, info: DistInfo,
                     criterion: FieldLoss, width: int) -> dict:
    """Loss (per number, as the training loss) and mAP or MAE over ``loader``; ``width``: the
    model's outputs. Collective when distributed, like `evaluate.evaluate`."""
    broadcast_buffers(model, info)
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=device)   # loss, absolute error, numbers
    samples = 0
    hist = np.zeros((2, width * BINS), dtype=np.float64)          # multi-label: positives, negatives per bin
    with torch.inference_mode():
        for images, targets in loader:
            with amp.autocast():
                outputs = model(images)
            y = criterion.pick(targets)
            outputs = outputs.float().reshape(y.shape)
            samples += y.shape[0]
            totals += torch.stack([criterion(outputs, targets, reduction="sum").double(),
                                   (outputs - y).abs().sum().double(),
                                   torch.full((), y.numel(), dtype=torch.float64, device=device)])
            if criterion.kind == MULTI_LABEL:
                scores = torch.sigmoid(outputs).cpu().numpy()
                bins = np.minimum((scores * BINS).astype(np.int64), BINS - 1) + np.arange(width)[None, :] * BINS
                positive = y.cpu().numpy() > 0.5
                hist[0] += np.bincount(bins[positive], minlength=width * BINS)
                hist[1] += np.bincount(bins[~positive], minlength=width * BINS)
    model.train()
    loss, abs_err, numbers, samples = all_reduce_sum(
        torch.cat([totals, torch.tensor([float(samples)], dtype=torch.float64, device=device)]), info).tolist()
    per = 1.0 / max(numbers, 1.0)
    out = {"val_loss": loss * per, "val_images": int(samples)}
    if criterion.kind == MULTI_LABEL:
        summed = all_reduce_sum(torch.as_tensor(hist, device=device), info).cpu().numpy()
        ap = average_precision(summed[0].reshape(width, BINS), summed[1].reshape(width, BINS))
        out["mAP"] = float(np.nanmean(ap)) if np.isfinite(ap).any() else float("nan")
    else:
        out["mae"] = abs_err * per
    return out


def validate(model: nn.Module, loader, amp: Amp, info: DistInfo, task: Task, cfg) -> dict:
    """The end-of-epoch validation of ``task``: top-1/top-5 for classes, mIoU for masks, else mAP or MAE."""
    if task.kind == CLASSIFY:
        return evaluate(model, loader, amp, info.device, info, task.outputs)
    if task.kind == SEGMENTATION:
        return evaluate_segmentation(model, loader, amp, info.device, info, task.criterion(cfg), task.outputs)
    return evaluate_targets(model, loader, amp, info.device, info, task.criterion(cfg), task.outputs)
