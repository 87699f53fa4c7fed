"""The one sample path, called in this process: rows written (decoded, transformed,
normalized), a bad record substituted by the rule and reported as a fact with its own crop
and flip, a failure reported with its row, an abandoned run skipped."""
from __future__ import annotations

import shutil

import cv2
import lmdb
import numpy as np
import pytest

from feedline import open_dataset
from feedline.planning.augment import AugmentSpec, plan as plan_augment
from feedline.core.choices import Order
from feedline.decoders import get_decoder
from feedline.decoders.base import Box
from feedline.core.errors import ChecksumError, UnavailableError
from feedline.dataset.format import image_key
from feedline.planning.plan import EpochPlan
from feedline.sources.arena import Arena
from feedline.sources.fill import IDLE, Chunk, Control, RunSpec, SampleSpec, fill_chunk
from feedline.sources.normalization import normalize_table
from feedline.sources.rows import RowFormat, RowWriter
from feedline.sources.substitute import substitute_sample
from feedline.transforms import SampleTransforms

SPEC = AugmentSpec(size=(24, 24), train=True)
EPOCH = EpochPlan(SPEC, seed=5, epoch=3, order=Order.RANDOM, batch_size=4, drop_last=False)
RUN = RunSpec(generation=1, epoch=3, augment=SPEC)


def setting(path, substitute=False, transforms=None, fmt=RowFormat(4, (24, 24))):
    store = open_dataset(str(path))
    spec = SampleSpec(store, get_decoder("simplejpeg"), transforms, 5, substitute)
    plan = next(EPOCH.batches(store.labels, store.sizes))
    control = np.zeros(2, dtype=np.int64)
    control[0] = RUN.generation
    return spec, plan, RowWriter(fmt, Arena(fmt.nbytes, shared=False).memory), Control(control, 0)


def chunk_of(plan, first, indices=None, generation=RUN.generation, store=None):
    """Rows ``first ..`` of ``plan``, or the records ``indices`` there, each with its own crop and flip."""
    if indices is None:
        return Chunk(7, generation, 0, first, plan.indices[first:], plan.boxes[first:], plan.flips[first:])
    indices = np.asarray(indices, dtype=np.int64)
    hw = store.sizes[indices]
    boxes, flips = plan_augment(SPEC, 5, RUN.epoch, indices, hw[:, 0], hw[:, 1])
    return Chunk(7, generation, 0, first, indices, boxes, flips)


def decoded(spec, index, box, flip):
    out = np.empty((24, 24, 3), dtype=np.uint8)
    spec.decoder.decode_into(spec.store.read_checked(index), Box(*box), flip, out)
    return out


@pytest.fixture
def damaged(packed_lmdb, tmp_path):
    """The packed store with record 2's bytes flipped: a checksum mismatch."""
    path = tmp_path / "damaged.lmdb"
    shutil.copy(packed_lmdb, path)
    env = lmdb.open(str(path), subdir=False, lock=False)
    with env.begin(write=True) as txn:
        value = bytearray(txn.get(image_key(2)))
        value[100:140] = bytes(40)
        txn.put(image_key(2), bytes(value))
    env.close()
    return path


def test_rows_are_written_from_first_on(packed_lmdb):
    spec, plan, rows, control = setting(packed_lmdb)
    done = fill_chunk(chunk_of(plan, 2), spec, RUN, rows, control)
    assert done.ticket == 7 and done.failure is None and done.substituted == ()
    for j in (2, 3):
        assert np.array_equal(rows.rows[j], decoded(spec, int(plan.indices[j]), plan.boxes[j], bool(plan.flips[j])))
    assert not rows.rows[:2].any() and control.held[0] == IDLE


def test_rows_of_a_host_batch_are_normalized_into_its_layout(packed_lmdb):
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    fmt = RowFormat(4, (24, 24), "float16", channels_last=False, table=normalize_table(mean, std))
    spec, plan, rows, control = setting(packed_lmdb, fmt=fmt)
    fill_chunk(chunk_of(plan, 0), spec, RUN, rows, control)
    pixels = decoded(spec, int(plan.indices[1]), plan.boxes[1], bool(plan.flips[1])).astype(np.float64)
    want = ((pixels / 255 - np.array(mean)) / np.array(std)).transpose(2, 0, 1)
    assert rows.rows.dtype == np.float16 and rows.rows.shape == (4, 3, 24, 24)
    np.testing.assert_allclose(rows.rows[1].astype(np.float64), want, atol=2e-3)


def test_per_sample_transforms_are_drawn_for_the_planned_index_and_applied(packed_lmdb):
    def tint(image, rng):
        return np.full_like(image, int(rng.integers(0, 256)))

    t = SampleTransforms([tint])
    spec, plan, rows, control = setting(packed_lmdb, transforms=t)
    fill_chunk(chunk_of(plan, 1), spec, RUN, rows, control)
    params = t.draw(5, RUN.epoch, plan.indices)
    for j in (1, 2, 3):
        blank = np.zeros((24, 24, 3), dtype=np.uint8)
        assert np.array_equal(rows.rows[j], t.apply_drawn(blank, params, j, 5, RUN.epoch, int(plan.indices[j])))


def test_a_bad_record_is_substituted_by_the_rule_and_reported_as_a_fact(damaged):
    spec, plan, rows, control = setting(damaged, substitute=True)
    done = fill_chunk(chunk_of(plan, 0, [0, 2, 1], store=spec.store), spec, RUN, rows, control)
    assert done.failure is None and len(done.substituted) == 1
    fact = done.substituted[0]
    other, box, flip = substitute_sample(SPEC, 5, RUN.epoch, 2, 0, spec.store.sizes)
    assert (fact.row, fact.index, fact.box, fact.flip) == (1, other, tuple(box.tolist()), flip)
    assert isinstance(fact.error, ChecksumError) and fact.error.index == 2
    assert np.array_equal(rows.rows[1], decoded(spec, other, box, flip))   # its own crop and flip
    boxes, flips = plan_augment(SPEC, 5, RUN.epoch, [1], *spec.store.sizes[[1]].T)
    assert np.array_equal(rows.rows[2], decoded(spec, 1, boxes[0], bool(flips[0])))


def test_without_substitution_a_bad_record_stops_the_chunk_at_its_row(damaged):
    spec, plan, rows, control = setting(damaged)
    done = fill_chunk(chunk_of(plan, 0, [0, 2, 1], store=spec.store), spec, RUN, rows, control)
    assert done.failure.row == 1 and done.failure.bad_record and isinstance(done.failure.error, ChecksumError)
    assert not rows.rows[2].any() and control.held[0] == IDLE


def test_unreachable_data_is_never_substituted(packed_lmdb):
    class Unreachable:
        def __getattr__(self, name):
            return getattr(store, name)

        def read_checked(self, index):
            raise UnavailableError("the bucket does not answer")

    spec, plan, rows, control = setting(packed_lmdb, substitute=True)
    store = spec.store
    spec = SampleSpec(Unreachable(), spec.decoder, None, 5, True)
    done = fill_chunk(chunk_of(plan, 0), spec, RUN, rows, control)
    assert done.substituted == () and isinstance(done.failure.error, UnavailableError)


def test_a_failing_transform_is_reported_and_is_no_bad_record(packed_lmdb):
    def fails(image, rng):
        raise ValueError("the user's bug")

    spec, plan, rows, control = setting(packed_lmdb, transforms=SampleTransforms([fails]))
    done = fill_chunk(chunk_of(plan, 2), spec, RUN, rows, control)
    assert done.failure.row == 2 and not done.failure.bad_record and "user's bug" in str(done.failure.error)


def test_an_abandoned_run_is_skipped(packed_lmdb):
    spec, plan, rows, control = setting(packed_lmdb)
    control.array[0] = RUN.generation + 1   # a newer run began
    done = fill_chunk(chunk_of(plan, 0), spec, RUN, rows, control)
    assert done.failure is None and not rows.rows.any()


def test_the_held_record_is_the_one_being_made(packed_lmdb):
    seen = []

    def watch(image, rng):
        seen.append(int(control.held[0]))
        return cv2.flip(image, 0)

    spec, plan, rows, control = setting(packed_lmdb, transforms=SampleTransforms([watch]))
    fill_chunk(chunk_of(plan, 0), spec, RUN, rows, control)
    assert seen == plan.indices.tolist() and control.held[0] == IDLE
