"""sources/finisher.py: the one finishing every engine's Slots go through, for what each
engine left to do (``Filled``), checked on the CPU against the functions it is made of; and
the host Finisher hands the Slot's own memory over. (The CUDA Finisher: test_cuda_finisher.py.)"""
from __future__ import annotations

import numpy as np
import torch

from feedline.core.config import OutputSpec, TransformSpec
from feedline.planning.plan import BatchPlan
from feedline.sources.finisher import Filled, HostFinisher, finish_batch
from feedline.sources.normalization import normalize_batch
from feedline.sources.slot import Slot
from feedline.sources.transforming import Transforming
from feedline.transforms import Mixup

OUT = OutputSpec(device="cpu")
PLAN = BatchPlan(0, 0, np.arange(4), np.zeros((4, 4), np.int64), np.zeros(4, bool), np.array([0, 1, 2, 3]))


def pixels() -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(0).integers(0, 256, (4, 3, 6, 5), dtype=np.uint8))


def invert(image, rng):
    return 255 - image


def test_pixels_without_transforms_are_normalized():
    got, labels = finish_batch(pixels(), torch.arange(4), PLAN, None, OUT, Filled(False, True))
    assert torch.equal(got, normalize_batch(pixels(), OUT)) and labels.tolist() == [0, 1, 2, 3]


def test_float_pixels_are_clamped_to_0_255_before_normalizing():
    """The GPU engine's resized pixels may overshoot 0..255 (antialiased bilinear)."""
    floats = pixels().float()
    floats[0, 0, 0, 0], floats[1, 0, 0, 0] = -3.0, 300.0
    got, _ = finish_batch(floats.clone(), None, PLAN, None, OUT, Filled(False, False))
    assert torch.equal(got, normalize_batch(floats.clamp(0, 255), OUT))


def test_samples_still_due_run_on_the_host_first():
    """An engine that made whole batches (gpu, dali) leaves the per-sample transforms to the
    Finisher: the result is Transforming.finish_pixels's, also from float pixels (rounded)."""
    t = Transforming(TransformSpec([invert]), 5, 4, batched_on_device=False)
    want, _ = t.finish_pixels(pixels(), None, PLAN, OUT)
    got, _ = finish_batch(pixels(), None, PLAN, t, OUT, Filled(False, False))
    assert torch.equal(got, want)
    got, _ = finish_batch(pixels().float() + 0.2, None, PLAN, t, OUT, Filled(False, False))
    assert torch.equal(got, want)


def test_samples_already_applied_are_not_applied_again():
    t = Transforming(TransformSpec([invert]), 5, 4, batched_on_device=False)
    got, _ = finish_batch(pixels(), None, PLAN, t, OUT, Filled(False, True))
    assert torch.equal(got, normalize_batch(pixels(), OUT))


def test_normalized_images_get_only_the_batch_transforms():
    t = Transforming(TransformSpec([invert], [Mixup(1.0, 1.0)]), 5, 4)
    images = normalize_batch(pixels(), OUT)
    got, targets = finish_batch(images.clone(), torch.arange(4), PLAN, t, OUT, Filled(True, True))
    want, want_targets = t.on_batch(images.clone(), torch.arange(4), PLAN)
    assert torch.equal(got, want) and torch.equal(targets, want_targets) and targets.shape == (4, 4)
    same, _ = finish_batch(images, torch.arange(4), PLAN, None, OUT, Filled(True, True))
    assert same is images


def test_the_host_finisher_hands_over_the_slots_own_memory():
    images = normalize_batch(pixels(), OUT)
    slot = Slot(0, torch.cat([images, images]), torch.arange(8), None, (6, 5), plan=PLAN)
    finisher = HostFinisher(OUT, None, None, Filled(True, True))
    finished = finisher.finish(slot)
    got, labels = finisher.hand_over(finished)
    assert got.shape[0] == 4 and got.data_ptr() == slot.images.data_ptr()
    assert labels.tolist() == [0, 1, 2, 3] and labels.data_ptr() == slot.labels.data_ptr()
    assert finished.copied is None and finisher.copied(finished, wait=False)
