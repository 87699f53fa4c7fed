"""sources/rows.py: where a decode thread decodes sample j of a Slot and how it writes it: a
staging row in place (with the drawn per-sample transforms), a host row normalized."""
from __future__ import annotations

import numpy as np
import torch

from feedline.config import OutputSpec
from feedline.plan import BatchPlan
from feedline.sources.normalization import HostNormalizer, layout_of
from feedline.sources.ring import output_slot, staging_slot
from feedline.sources.rows import HostRows, StagingRows


class Inverted:
    """Drawn parameters that invert row 1 only (what transforming.DrawnSamples.apply does)."""

    def apply(self, j, image):
        return 255 - image if j == 1 else image


def plan_of(n):
    return BatchPlan(0, 0, np.arange(n), np.zeros((n, 4), np.int64), np.zeros(n, bool), np.zeros(n, np.int64))


def sample(seed):
    return np.random.default_rng(seed).integers(0, 256, (8, 6, 3), dtype=np.uint8)


def test_a_staging_row_is_decoded_in_place_and_transformed_there():
    rows, slot = StagingRows(), staging_slot(0, 2, (8, 6), None, pin=False)
    slot.load(plan_of(2), Inverted())
    for j in range(2):
        out = rows.buffer(slot, j)
        out[:] = sample(j)
        rows.write(slot, j, out)
    assert np.array_equal(slot.image_rows[0], sample(0)) and np.array_equal(slot.image_rows[1], 255 - sample(1))


def test_a_host_row_is_the_normalized_sample():
    output = OutputSpec(device="cpu")
    rows, slot = HostRows(output), output_slot(0, 2, (8, 6), output, None)
    slot.load(plan_of(2), Inverted())
    for j in range(2):
        out = rows.buffer(slot, j)
        out[:] = sample(j)
        rows.write(slot, j, out)
    want = torch.empty((2, 3, 8, 6), memory_format=layout_of(output))
    normalize = HostNormalizer(output)
    normalize(sample(0), want[0])
    normalize(255 - sample(1), want[1])
    assert torch.allclose(slot.images, want)


def test_uint8_channels_last_rows_are_decoded_straight_into_the_batch():
    output = OutputSpec(mean=None, device="cpu", channels_last=True)
    rows, slot = HostRows(output), output_slot(0, 2, (8, 6), output, None)
    slot.load(plan_of(2))
    out = rows.buffer(slot, 1)
    out[:] = sample(3)
    rows.write(slot, 1, out)
    assert np.shares_memory(out, slot.images.numpy())
    assert torch.equal(slot.images[1], torch.from_numpy(sample(3)).permute(2, 0, 1))
