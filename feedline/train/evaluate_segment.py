"""Validation of segmentation runs, every image once over all ranks, like evaluate.py: the loss
per pixel and the mean intersection over union, from one confusion matrix of the classes
(true x predicted, summed over ranks); pixels of ``IGNORE_INDEX`` count nowhere, and a class
that is neither in the masks nor predicted is left out of the mean (as torchmetrics' and
mmsegmentation's mIoU leave it)."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .distributed import DistInfo, all_reduce_sum, broadcast_buffers
from .step import Amp
from .task import IGNORE_INDEX, FieldLoss


def iou_per_class(confusion: np.ndarray) -> np.ndarray:
    """Per class: true positives / (true + predicted - true positives); NaN where both are empty."""
    hits = np.diag(confusion).astype(np.float64)
    union = confusion.sum(axis=0) + confusion.sum(axis=1) - hits
    return np.divide(hits, union, out=np.full(len(hits), np.nan), where=union > 0)


def evaluate_segmentation(model: nn.Module, loader, amp: Amp, device: torch.device, info: DistInfo,
                          criterion: FieldLoss, classes: int) -> dict:
    """Loss per labelled pixel, mIoU and pixel accuracy over ``loader``. Collective when
    distributed, like `evaluate.evaluate`."""
    broadcast_buffers(model, info)
    model.eval()
    confusion = torch.zeros(classes * classes, dtype=torch.float64, device=device)
    totals = torch.zeros(2, dtype=torch.float64, device=device)   # loss summed over pixels, images
    with torch.inference_mode():
        for images, targets in loader:
            with amp.autocast():
                scores = model(images)
            y = criterion.pick(targets).long()
            totals += torch.stack([criterion(scores, targets, reduction="sum").double(),
                                   torch.full((), y.shape[0], dtype=torch.float64, device=device)])
            counted = (y != IGNORE_INDEX) & (y >= 0) & (y < classes)
            pairs = y[counted] * classes + scores.argmax(dim=1)[counted]
            confusion += torch.bincount(pairs, minlength=classes * classes).double()
    model.train()
    confusion = all_reduce_sum(confusion, info).cpu().numpy().reshape(classes, classes)
    loss, images = all_reduce_sum(totals, info).tolist()
    pixels = confusion.sum()
    iou = iou_per_class(confusion)
    return {"val_loss": loss / max(pixels, 1.0), "mIoU": float(np.nanmean(iou)) if np.isfinite(iou).any() else 0.0,
            "pixel_accuracy": float(np.trace(confusion) / max(pixels, 1.0)), "val_images": int(images)}
