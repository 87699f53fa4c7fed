"""The GPU engine's masks (sources/gpu_masks.py): cut out on the host, resized with torch's
nearest on the device and mirrored; the same class per pixel as the CPU workers' path for the
same whole-pixel crop. The device is the CPU here; the `cuda` tests run the same on a GPU."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from masks_helpers import IGNORE, packed, quadrant_mask

from feedline import open_dataset
from feedline.planning.augment import AugmentSpec
from feedline.core.choices import Order
from feedline.planning.augment import plan as plan_augment
from feedline.decoders.base import Box, whole_pixels
from feedline.dataset.mask_codec import encode
from feedline.dataset.mask_sampling import sample_mask
from feedline.planning.plan import EpochPlan
from feedline.sources.fill import MaskSpec
from feedline.sources.gpu_masks import batch_masks, resized_mask

SPEC = MaskSpec(png=False, ignore_index=IGNORE)


@pytest.mark.parametrize("flip", [False, True])
def test_a_cut_out_mask_resized_on_a_device_is_the_workers_mask(flip):
    """Rows 10..49 and columns 20..59 of a quadrant mask into 20x20 (test_mask_sampling works it by hand)."""
    mask = quadrant_mask(60, 80, split=(30, 40))
    want = np.empty((20, 20), np.int64)
    sample_mask(encode(mask), Box(10, 20, 40, 40), flip, want, IGNORE)
    got = resized_mask(mask[10:50, 20:60].astype(np.int32), (20, 20), flip, "cpu", torch.int64, IGNORE)
    assert got.dtype == torch.int64 and np.array_equal(got.numpy(), want)
    assert (resized_mask(np.zeros((0, 5), np.int32), (3, 4), False, "cpu", torch.int16, IGNORE) == IGNORE).all()


def epoch(train: bool, size=(36, 44)) -> EpochPlan:
    spec = AugmentSpec(size=size, train=train)
    return EpochPlan(spec=spec, seed=5, epoch=1, order=Order.SEQUENTIAL, batch_size=4, drop_last=False)


@pytest.mark.parametrize("train", [True, False])
def test_a_batchs_masks_follow_each_records_own_crop_and_flip(tmp_path, train):
    path, _ = packed(str(tmp_path), n=6, scale=1000)
    plan = epoch(train)
    with open_dataset(path) as store:
        decoded = np.array([4, 0, 5, 5])   # a substitute may come twice
        got = batch_masks(store, SPEC, decoded, plan, "cpu", torch.int32)
        hw = store.sizes[decoded]
        crops, flips = plan_augment(plan.spec, plan.seed, plan.epoch, decoded, hw[:, 0], hw[:, 1])
        for k, index in enumerate(decoded.tolist()):
            want = np.empty(plan.spec.size, np.int64)
            box = whole_pixels(Box(*crops[k].tolist()))   # the GPU engine's images are cut on whole pixels
            sample_mask(store.mask(index), Box(*(int(v) for v in box)), bool(flips[k]), want, IGNORE)
            assert np.array_equal(got[k].numpy(), want)
    assert got.dtype == torch.int32 and got.shape == (4, 36, 44)


@pytest.mark.cuda
def test_the_device_resize_on_a_gpu_equals_the_hosts(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    path, _ = packed(str(tmp_path), n=6, scale=1000)
    with open_dataset(path) as store:
        decoded = np.arange(6)
        host = batch_masks(store, SPEC, decoded, epoch(True), "cpu", torch.int64)
        cuda = batch_masks(store, SPEC, decoded, epoch(True), torch.device("cuda"), torch.int64)
    assert cuda.device.type == "cuda" and torch.equal(cuda.cpu(), host)
