"""sources/ring.py: the ring makes each position's Slot once and reuses it, unless (on the
host) the consumer still holds one of its tensors; staging Slots are pinned uint8 pixels."""
from __future__ import annotations

import torch

from feedline.config import OutputSpec
from feedline.sources.ring import output_ring, ring_slots, staging_ring


def test_the_ring_has_prefetch_plus_two_slots():
    assert ring_slots(1) == 3 and ring_slots(4) == 6


def test_a_staging_slot_is_made_once_and_reused():
    ring = staging_ring(3, 4, (8, 6), None, pin=False)
    slot = ring.slot(1)
    assert slot.images.shape == (4, 8, 6, 3) and slot.images.dtype == torch.uint8 and slot.number == 1
    kept = slot.images[:2]   # the consumer gets copies of staging slots: a view changes nothing
    assert ring.slot(1) is slot and ring.fresh == 0 and kept.data_ptr() == slot.images.data_ptr()


def test_a_host_slot_still_held_by_the_consumer_is_made_anew():
    ring = output_ring(2, 4, (8, 6), OutputSpec(device="cpu"), None)
    slot = ring.slot(0)
    assert slot.images.shape == (4, 3, 8, 6) and slot.images.dtype == torch.float32
    assert ring.slot(0) is slot and ring.fresh == 0      # nobody else holds it: reused
    held = slot.labels[:2]
    again = ring.slot(0)
    assert again is not slot and ring.fresh == 1          # held: fresh tensors for the ring
    assert again.images.data_ptr() != slot.images.data_ptr() and held.data_ptr() == slot.labels.data_ptr()
    del held, slot
    assert ring.slot(0) is again and ring.fresh == 1
