"""Validation: loss, top-1 and top-5 over every image of the validation set, once.

The validation loader gives each rank its exact share (``even_shards=False``): no image is
padded in twice to even out the ranks, so the counts summed over ranks are the data set's.
The ranks may run one batch more or less; the model runs without DDP here, so nothing
waits per batch, and the only collective is the final sum.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .distributed import DistInfo, all_reduce_sum, broadcast_buffers
from .step import Amp


def evaluate(model: nn.Module, loader, amp: Amp, device: torch.device, info: DistInfo,
             num_classes: int) -> dict:
    """Loss, top-1 and top-5 accuracy over ``loader``, summed over ranks. Counts stay on the
    device until the end; ``inference_mode`` skips autograd's bookkeeping entirely.
    Collective when distributed: every rank must call it; all evaluate rank 0's model."""
    broadcast_buffers(model, info)
    model.eval()
    k = min(5, num_classes)
    totals = torch.zeros(4, dtype=torch.float64, device=device)  # loss, top1, top5, samples
    with torch.inference_mode():
        for images, labels in loader:
            with amp.autocast():
                logits = model(images)
            logits = logits.float()
            hits = logits.topk(k, dim=1).indices.eq(labels[:, None])
            totals += torch.stack([F.cross_entropy(logits, labels, reduction="sum").double(),
                                   hits[:, :1].sum().double(), hits.sum().double(),
                                   torch.full((), labels.shape[0], dtype=torch.float64, device=device)])
    model.train()
    totals = all_reduce_sum(totals.clone(), info)
    loss, top1, topk, count = totals.tolist()
    per = 1.0 / max(count, 1.0)
    return {"val_loss": loss * per, "top1": top1 * per, "top5": topk * per, "val_images": int(count)}
