"""sources/transforming.py: the transforms as every engine applies them: the CUDA split
(host part on the decode threads, the rest batched) computes what the host computes, and
the mixers check int labels on a device from the plan."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from transforms_loader import epoch, loader

from feedline.transforms import ColorJitter, GaussianBlur, Mixup, RandAugment, RandomErasing, RandomGrayscale


def test_the_cuda_split_computes_what_the_host_computes(packed_lmdb):
    """The functions the CUDA path runs (host part on the decode threads, the rest batched
    with on_device, then normalize and mix), here on CPU tensors, against the CPU path."""
    from feedline.core.config import OutputSpec, TransformSpec
    from feedline.planning.plan import EpochPlan
    from feedline.sources.transforming import Transforming

    def invert(image, rng):
        return 255 - image

    spec = TransformSpec([RandAugment(2, 9), invert, ColorJitter(0.4, 0.4, 0.4, 0.1), RandomGrayscale(0.3),
                          GaussianBlur(5, (0.1, 2.0)), RandomErasing(0.5)], [Mixup(1.0, 1.0)])
    host_only, split = Transforming(spec, 5, 4, False), Transforming(spec, 5, 4, True)
    assert (len(split.host), len(split.device)) == (2, 4)
    with loader(packed_lmdb, transforms=[], batch_transforms=[], mean=None) as plain:
        pixels, labels = epoch(plain, 1)[0]
        plan = next(EpochPlan(plain.config.augment, 5, 0, plain.config.order, 8, False).batches(
            plain.store.labels, plain.store.sizes))
    out = OutputSpec(mean=None)
    a, ya = host_only.finish_pixels(pixels.clone(), labels.clone(), plan, out)
    rows = pixels.permute(0, 2, 3, 1).numpy().copy()          # the workers' part ...
    params = split.host.draw(5, plan.epoch, plan.indices)
    for j in range(len(rows)):
        rows[j] = split.host.apply_drawn(rows[j], params, j, 5, plan.epoch, int(plan.indices[j]))
    x = split.on_device(torch.from_numpy(rows).permute(0, 3, 1, 2), plan)   # ... then the side stream's
    b, yb = split.on_batch(x.contiguous(), labels.clone(), plan)
    assert torch.allclose(ya, yb)
    assert float((a.float() - b.float()).abs().mean()) <= 1.0


def test_mixers_check_int_labels_on_a_device_and_pass_multi_hot_ones():
    """On a device the mixers' label range is checked on the host from the plan's labels, for
    int labels only: a multi-label store's column is -1 (no `label` field), and its multi-hot
    targets must pass; an int `label` entry of a dict out of range is refused by name. The
    meta device stands in for CUDA: its values cannot be read back, as a CUDA stream's."""
    from feedline.core.config import TransformSpec
    from feedline.planning.plan import BatchPlan
    from feedline.sources.transforming import Transforming

    t = Transforming(TransformSpec((), (Mixup(1.0, 1.0),)), 5, 4, batched_on_device=True)
    images = torch.zeros(4, 3, 8, 8, device="meta")

    def plan(labels):
        return BatchPlan(0, 0, np.arange(4), np.zeros((4, 4), np.int64), np.zeros(4, bool), np.array(labels))

    multi_hot = torch.zeros(4, 4, device="meta")
    for targets in (multi_hot, {"labels": multi_hot, "target": torch.zeros(4, device="meta")}):
        _, mixed = t.on_batch(images, targets, plan([-1] * 4))
        assert (mixed if isinstance(mixed, torch.Tensor) else mixed["labels"]).shape == (4, 4)
    ints = torch.zeros(4, dtype=torch.int64, device="meta")
    for targets in (ints, {"label": ints, "labels": multi_hot}):
        with pytest.raises(ValueError, match=r"Mixup\(batch_transforms\[0\]\): a label is outside 0..3"):
            t.on_batch(images, targets, plan([0, 1, 2, 9]))
