"""sources/ring.py: the ring's shape and memory. Its Slots are made once each and reused,
unless (on the host) the consumer still holds one of its tensors: then a new Slot in a new
arena, the workers told to forget the old one; pixels for a CUDA Finisher are reused as they
are. The memory check counts what the ring and the device batches take, before any is made."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from feedline.core.config import OutputSpec
from feedline.sources import ring as ring_module
from feedline.sources.fill import SampleSpec
from feedline.sources.ring import ArenaRing, RingSpec, ring_slots, row_format
from feedline.sources.thread_workers import ThreadWorkers


def workers() -> ThreadWorkers:
    return ThreadWorkers(SampleSpec(None, None, None, 0, False), 1)


def test_the_ring_has_prefetch_plus_two_slots():
    assert ring_slots(1) == 3 and ring_slots(4) == 6 and RingSpec(2, 8, OutputSpec(device="cpu"), False).slots == 4


def test_the_host_bytes_are_the_slots_rows():
    pixels = 8 * 32 * 40 * 3
    assert RingSpec(3, 8, OutputSpec(device="cpu"), False).host_bytes((32, 40)) == 5 * 4 * pixels   # float32 rows
    assert RingSpec(3, 8, OutputSpec(mean=None, device="cpu"), False).host_bytes((32, 40)) == 5 * pixels
    bf16 = RingSpec(3, 8, OutputSpec(dtype=torch.bfloat16, device="cpu"), False)
    assert bf16.host_bytes((32, 40)) == 5 * pixels   # uint8 pixels: the Finisher normalizes


def test_a_batch_that_fits_is_not_refused(monkeypatch):
    spec = RingSpec(2, 8, OutputSpec(device="cpu"), False)
    need = spec.host_bytes((32, 32))
    monkeypatch.setattr(ring_module, "available_host_bytes", lambda: need)
    spec.check_fits((32, 32), host_ring=True)
    monkeypatch.setattr(ring_module, "available_host_bytes", lambda: need - 1)
    with pytest.raises(MemoryError, match=r"batch_size=8 at 32x32: the batch buffers need about 0\.0 GiB"):
        spec.check_fits((32, 32), host_ring=True)
    spec.check_fits((32, 32), host_ring=False)   # the engines that keep no ring on the host


def test_the_device_batches_count_their_masks_in_the_masks_dtype():
    """prefetch + 1 batches on a CUDA device: 3 x 2 images of 4 x 5 pixels (OutputSpec names a
    CUDA device without touching one)."""
    from feedline.sources.cuda_finisher import device_batches_bytes
    bf16 = OutputSpec(dtype=torch.bfloat16, device="cuda", mask_dtype=torch.int64)
    assert device_batches_bytes(2, 2 * 4 * 5 * 3, bf16) == 3 * 2 * 4 * 5 * 3 * 2
    assert device_batches_bytes(2, 2 * 4 * 5 * 3, bf16, 2 * 4 * 5) == 3 * (2 * 4 * 5 * 3 * 2 + 2 * 4 * 5 * 8)
    uint8_masks = OutputSpec(device="cuda", mask_dtype=torch.uint8)   # float32 images
    assert device_batches_bytes(0, 60, uint8_masks, 20) == 60 * 4 + 20
    assert device_batches_bytes(2, 60, OutputSpec(device="cpu"), 20) == 0   # nothing on a device


def test_a_host_slot_still_held_by_the_consumer_is_made_anew_in_a_new_arena():
    w = workers()
    memory = ArenaRing(RingSpec(1, 4, OutputSpec(device="cpu"), False), (8, 6), w, None)
    slot = memory.ring.slot(0)
    assert slot.images.shape == (4, 3, 8, 6) and slot.images.dtype == torch.float32
    first = slot.arena
    assert memory.ring.slot(0) is slot and memory.ring.fresh == 0      # nobody else holds it: reused
    held = slot.images[:2]
    again = memory.ring.slot(0)
    assert again is not slot and memory.ring.fresh == 1 and again.arena != first
    assert set(w._arenas) == {again.arena}                             # the old arena is forgotten
    assert again.images.data_ptr() != held.data_ptr()
    held[:] = 1                                                        # still the consumer's to use
    del held, slot
    assert memory.ring.slot(0) is again and memory.ring.fresh == 1


def test_pixels_for_a_cuda_finisher_are_reused_though_viewed():
    output = OutputSpec(device="cpu")
    object.__setattr__(output, "device", "cuda:0")   # its memory only: no CUDA needed to make the ring
    memory = ArenaRing(RingSpec(1, 4, output, pin=False), (8, 6), workers(), None)
    slot = memory.ring.slot(1)
    assert slot.images.shape == (4, 8, 6, 3) and slot.images.dtype == torch.uint8
    kept = slot.images[:2]
    assert memory.ring.slot(1) is slot and kept.data_ptr() == slot.images.data_ptr()


def test_a_host_batch_in_channels_last_is_seen_as_nchw_over_nhwc_rows():
    output = OutputSpec(channels_last=True, device="cpu")
    memory = ArenaRing(RingSpec(1, 2, output, False), (8, 6), workers(), None)
    images = memory.ring.slot(0).images
    assert images.shape == (2, 3, 8, 6) and images.is_contiguous(memory_format=torch.channels_last)
    assert row_format(output, 2, (8, 6)).shape == (2, 8, 6, 3)


def test_a_resized_ring_drops_the_old_arenas_first():
    w = workers()
    memory = ArenaRing(RingSpec(1, 2, OutputSpec(device="cpu"), False), (8, 6), w, None)
    for k in range(3):
        memory.ring.slot(k)
    bigger = memory.resized((16, 12))
    assert w._arenas == {} and bigger.ring.size == (16, 12)
    assert bigger.ring.slot(0).images.shape == (2, 3, 16, 12) and len(w._arenas) == 1
    assert list(w._arenas) == [bigger.ring.slot(0).arena]


def test_host_slots_of_a_loader_are_unpinned_views_of_their_arenas_and_cuda_is_not_touched(packed_lmdb):
    from feedline import FeedLoader
    with FeedLoader(str(packed_lmdb), batch_size=6, size=40, num_workers=2, device="cpu", engine="processes") as loader:
        next(iter(loader))
        memory = loader.source.memory
        slot = memory.ring.slot(0)
        assert memory.pinning is None and not torch.cuda.is_initialized()
        assert not slot.images.is_pinned() and not slot.labels.is_pinned()
        assert slot.images.shape == (6, 3, 40, 40)   # the consumer's batch, written by the workers into the arena


@pytest.mark.cuda
def test_on_cuda_the_arenas_are_pinned_and_the_engines_give_the_same_batches(packed_lmdb, caplog):
    import logging

    from feedline import FeedLoader
    out, seen = {}, {}
    options = dict(batch_size=6, shuffle=True, train=True, size=40, seed=3, decoder="simplejpeg", num_workers=2,
                   device="cuda")
    with caplog.at_level(logging.WARNING, logger="feedline.sources.host_pinning"):
        for engine in ("processes", "threads"):
            with FeedLoader(str(packed_lmdb), engine=engine, **options) as loader:
                out[engine] = [(x.clone(), y.clone()) for x, y in loader]
                slot = loader.source.memory.ring.slot(0)
                seen[engine] = (slot.images.is_pinned(), slot.labels.is_pinned(), loader.source.memory.pinning.refused)
    assert seen == {"processes": (True, True, False), "threads": (True, True, False)}
    assert [r for r in caplog.records if r.name == "feedline.sources.host_pinning"] == []
    assert len(out["processes"]) == len(out["threads"]) == 8
    for (x, y), (tx, ty) in zip(out["processes"], out["threads"], strict=True):
        assert x.is_cuda and torch.equal(x, tx) and torch.equal(y, ty)


def test_masks_sit_after_the_pixels_in_the_arena_the_workers_write():
    """Rows of float32 pixels (4 x 8 x 6 x 3 x 4 bytes = 2304, a multiple of 64), then int16
    masks: the Slot's "mask" views the arena there, and what a worker writes into row j's
    mask is what the consumer's tensor holds; a kept mask makes the Slot anew."""
    output = OutputSpec(device="cpu", mask_dtype=torch.int16)
    fmt = row_format(output, 4, (8, 6), masks=True)
    assert (fmt.mask_offset, fmt.nbytes) == (2304, 2304 + 4 * 8 * 6 * 2)
    assert RingSpec(1, 4, output, False, masks=True).host_bytes((8, 6)) == 3 * fmt.nbytes
    assert row_format(OutputSpec(device="cpu"), 4, (8, 6)).nbytes == 2304   # without masks, as before
    w = workers()
    memory = ArenaRing(RingSpec(1, 4, output, False, masks=True), (8, 6), w, None)
    slot = memory.ring.slot(0)
    mask = slot.targets["mask"]
    assert mask.shape == (4, 8, 6) and mask.dtype == torch.int16
    from feedline.sources.rows import RowWriter
    fmt, arena = w._arenas[slot.arena]
    rows = RowWriter(fmt, arena.memory)
    rows.mask(2)[...] = np.arange(48).reshape(8, 6)
    rows.write(2, np.full((8, 6, 3), 255, np.uint8))
    assert torch.equal(mask[2], torch.arange(48, dtype=torch.int16).reshape(8, 6))
    assert (mask[[0, 1, 3]] == 0).all()
    white = torch.tensor([(1 - m) / s for m, s in zip(output.mean, output.std)]).view(3, 1, 1)
    assert torch.allclose(slot.images[2], white.expand(3, 8, 6))   # the pixels' rows, untouched by the mask's
    kept = mask[2:3]
    assert memory.ring.slot(0) is not slot and memory.ring.fresh == 1
    del kept
