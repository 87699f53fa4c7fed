"""sources/dispatch.py: each Slot's rows go to the workers in chunks and come back filled, in
order; the workers' facts are recorded as they are: a substitute in the ledger and in the
Slot's labels, a failure raised when its batch is due (after the batches before it), a
user's exception with a note naming the worker and the record."""
from __future__ import annotations

import numpy as np
import pytest
from engine_helpers import damaged_copy, epoch_plan, make_workers, queue_of, ring_of

from feedline import open_dataset
from feedline.core.choices import OnError
from feedline.decoders import get_decoder
from feedline.decoders.base import Box
from feedline.core.errors import DecodeError
from feedline.sources.dispatch import CHUNKS_PER_WORKER
from feedline.sources.substitute import substitute_sample
from feedline.core.stats import LoaderStats
from feedline.transforms import SampleTransforms

DAMAGED = 5   # a record of the first batch of 8, in sequential order


def filled(queue, memory, plan):
    slot = memory.ring.slot(plan.number % memory.ring.slots)
    slot.load(plan)
    queue.submit(slot)
    return slot


@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_a_slot_comes_back_filled_with_its_plans_pixels(photo_folder, kind):
    store = open_dataset(str(photo_folder))
    epoch = epoch_plan(batch_size=8)
    workers = make_workers(store, kind)
    memory = ring_of(workers, epoch)
    sent = []
    send = workers.send
    workers.send = lambda chunk: sent.append(len(chunk.indices)) or send(chunk)
    try:
        queue = queue_of(workers, epoch)
        plans = list(epoch.batches(store.labels, store.sizes))[:2]
        slots = [filled(queue, memory, plan) for plan in plans]
        assert [queue.next_filled() for _ in plans] == slots and queue.next_filled() is None
    finally:
        workers.close()
    per = -(-8 // (2 * CHUNKS_PER_WORKER))   # about CHUNKS_PER_WORKER chunks per worker and batch
    assert sum(sent) == 16 and set(sent) == {per}
    decoder = get_decoder("opencv")
    for slot, plan in zip(slots, plans):
        assert slot.labels.tolist() == plan.labels.tolist()
        for j in (0, 7):
            want = np.empty((32, 32, 3), np.uint8)
            decoder.decode_into(store.read_checked(int(plan.indices[j])), Box(*plan.boxes[j]), bool(plan.flips[j]),
                                want)
            assert np.array_equal(slot.images[j].permute(1, 2, 0).numpy(), want)


@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_a_substitute_is_recorded_as_the_worker_reported_it(photo_folder, tmp_path, kind):
    store = open_dataset(str(photo_folder))
    rel = store.path(DAMAGED)
    store = open_dataset(damaged_copy(photo_folder, tmp_path, [rel]))
    epoch, stats = epoch_plan(batch_size=8), LoaderStats()
    workers = make_workers(store, kind, substitute=True)
    memory = ring_of(workers, epoch)
    try:
        queue = queue_of(workers, epoch, stats, OnError.SUBSTITUTE)
        plan = next(epoch.batches(store.labels, store.sizes))
        slot = filled(queue, memory, plan)
        assert queue.next_filled() is slot
    finally:
        workers.close()
    other, box, flip = substitute_sample(epoch.spec, 0, 0, DAMAGED, 0, store.sizes)
    [record] = stats.bad_records
    assert (record.index, record.position, record.path, record.substitute) == (DAMAGED, DAMAGED, rel, other)
    assert slot.decoded.tolist() == [other if i == DAMAGED else i for i in plan.indices.tolist()]
    assert slot.labels[DAMAGED] == store.label(other)
    want = np.empty((32, 32, 3), np.uint8)
    get_decoder("opencv").decode_into(store.read_checked(other), Box(*box), flip, want)
    assert np.array_equal(slot.images[DAMAGED].permute(1, 2, 0).numpy(), want)   # its own crop and flip


@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_a_bad_record_is_raised_when_its_batch_is_due(photo_folder, tmp_path, kind):
    store = open_dataset(str(photo_folder))
    rel = store.path(8 + DAMAGED)
    store = open_dataset(damaged_copy(photo_folder, tmp_path, [rel]))
    epoch, stats = epoch_plan(batch_size=8), LoaderStats()
    workers = make_workers(store, kind)
    memory = ring_of(workers, epoch)
    try:
        queue = queue_of(workers, epoch, stats)
        plans = list(epoch.batches(store.labels, store.sizes))[:2]
        first = filled(queue, memory, plans[0])
        filled(queue, memory, plans[1])
        assert queue.next_filled() is first
        with pytest.raises(DecodeError, match=f"record {8 + DAMAGED} \\({rel}\\)") as info:
            queue.next_filled()
    finally:
        workers.close()
    assert info.value.index == 8 + DAMAGED and info.value.path == rel
    assert [(r.index, r.batch, r.position, r.substitute) for r in stats.bad_records] == [(8 + DAMAGED, 1, DAMAGED, None)]


def fails(image, rng):
    raise ValueError("the user's bug")


@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_a_users_exception_names_the_worker_and_the_record(photo_folder, kind):
    store = open_dataset(str(photo_folder))
    epoch = epoch_plan(batch_size=8)
    workers = make_workers(store, kind, count=1, transforms=SampleTransforms([fails]))   # one: row 0 fails first
    memory = ring_of(workers, epoch)
    try:
        queue = queue_of(workers, epoch)
        filled(queue, memory, next(epoch.batches(store.labels, store.sizes)))
        with pytest.raises(ValueError, match="the user's bug") as info:
            queue.next_filled()
    finally:
        workers.close()
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert f"in feedline worker {'thread' if kind == 'threads' else 'process'}" in notes
    assert f"on record 0 ({store.path(0)})" in notes
    if kind == "processes":   # the traceback did not cross the pipe: its text did
        assert "the worker's traceback" in notes and "in fails" in notes
