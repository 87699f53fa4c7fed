"""sources/slot.py: a Slot made whole, its numpy views (the consumer's labels and targets)
the same memory as its tensors, and
what loading a plan and substituting a record change (nothing else)."""
from __future__ import annotations

import numpy as np
import torch

from feedline.planning.plan import BatchPlan
from feedline.sources.slot import Slot, made_slot


def plan_of(labels, number=3) -> BatchPlan:
    n = len(labels)
    return BatchPlan(0, number, np.arange(10, 10 + n), np.zeros((n, 4), np.int64), np.zeros(n, bool),
                     np.asarray(labels, np.int64))


def staging(n=4, size=(6, 5), targets=None) -> Slot:
    return Slot(1, torch.zeros((n, *size, 3), dtype=torch.uint8), torch.full((n,), -7, dtype=torch.int64),
                targets, size)


def test_the_numpy_views_are_the_slots_memory():
    slot = staging(targets={"target": torch.zeros(4, 2)})
    slot.label_rows[2] = 9
    slot.target_rows["target"][3] = 1.5
    assert int(slot.labels[2]) == 9 and float(slot.targets["target"][3, 0]) == 1.5
    assert slot.size == (6, 5)


def test_tensors_on_a_device_get_no_row_views():
    meta = Slot(0, torch.zeros((2, 4, 4, 3), dtype=torch.uint8, device="meta"),
                torch.zeros(2, dtype=torch.int64, device="meta"), {"target": torch.zeros(2, device="meta")}, (4, 4))
    assert meta.label_rows is None and meta.target_rows is None


def test_loading_a_plan_writes_its_labels():
    slot, plan = staging(), plan_of([5, 6, 7])
    slot.load(plan)
    assert slot.plan is plan and len(slot) == 3
    assert slot.labels.tolist() == [5, 6, 7, -7]   # a short batch leaves the rest as it was
    assert slot.decoded.tolist() == [10, 11, 12]
    slot.decoded[0] = 99
    assert plan.indices[0] == 10, "the decoded indices are the slot's own, not the plan's"


def test_a_substitute_changes_its_row_only():
    slot = staging()
    slot.load(plan_of([5, 6, 7]))
    slot.substitute(1, 42, 3)
    assert slot.decoded.tolist() == [10, 42, 12] and slot.labels.tolist()[:3] == [5, 3, 7]


def test_a_made_slot_is_loaded_and_filled():
    images = torch.zeros((2, 3, 8, 6))
    slot = made_slot(plan_of([1, 2]), images, torch.tensor([1, 2]), None, [4, 9])
    assert slot.number == 3 and slot.size == (8, 6) and slot.decoded.tolist() == [4, 9]
    assert slot.tensors()[0] is images
