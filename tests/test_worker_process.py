"""One worker's fill, called in this process: rows written, a bad record reported with its
row, an abandoned run skipped."""
from __future__ import annotations

import numpy as np

from feedline import open_dataset
from feedline.augment import AugmentSpec
from feedline.choices import Order
from feedline.decoders import get_decoder
from feedline.decoders.base import Box
from feedline.plan import EpochPlan
from feedline.sources.shared_rows import Arena, RowFormat, RowWriter
from feedline.sources.worker_process import IDLE, Chunk, WorkerSetup, fill

EPOCH = EpochPlan(AugmentSpec(size=(24, 24)), seed=5, epoch=0, order=Order.RANDOM, batch_size=4, drop_last=False)


def setting(packed_lmdb, substitute=False):
    store = open_dataset(str(packed_lmdb))
    decoder = get_decoder("simplejpeg")
    plan = next(EPOCH.batches(store.labels, store.sizes))
    fmt = RowFormat(4, (24, 24))
    rows = RowWriter(fmt, Arena(fmt.nbytes).memory)
    control = np.zeros(2, dtype=np.int64)
    setup = WorkerSetup(store, decoder, None, 5, substitute, 0)
    return store, decoder, plan, rows, control, setup


def chunk_of(plan, first, generation=0, indices=None):
    indices = plan.indices[first:] if indices is None else np.asarray(indices, dtype=np.int64)
    return Chunk(7, generation, 0, first, 0, indices, plan.boxes[first:], plan.flips[first:], EPOCH.spec)


def test_rows_are_written_from_first_on(packed_lmdb):
    store, decoder, plan, rows, control, setup = setting(packed_lmdb)
    done = fill(chunk_of(plan, 2), setup, rows, control[1:], control)
    assert done.ticket == 7 and done.error is None and done.substitutes == ()
    expected = np.empty((24, 24, 3), dtype=np.uint8)
    decoder.decode_into(store.read_checked(int(plan.indices[3])), Box(*plan.boxes[3]), bool(plan.flips[3]), expected)
    assert np.array_equal(rows.rows[3], expected) and not rows.rows[:2].any()
    assert control[1] == IDLE


def test_a_bad_record_is_reported_with_its_row(packed_lmdb):
    store, decoder, plan, rows, control, setup = setting(packed_lmdb)
    done = fill(chunk_of(plan, 2, indices=[plan.indices[2], len(store) + 5]), setup, rows, control[1:], control)
    row, error, bad_record = done.error
    assert row == 3 and bad_record and control[1] == IDLE


def test_an_abandoned_run_is_skipped(packed_lmdb):
    store, decoder, plan, rows, control, setup = setting(packed_lmdb)
    control[0] = 1   # a newer run began
    done = fill(chunk_of(plan, 0, generation=0), setup, rows, control[1:], control)
    assert done.error is None and not rows.rows.any()
