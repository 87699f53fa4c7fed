"""Scratch: a batch-sized temporary handed out again on the same thread while it fits, a new
one when the shape, dtype or layout changes, never the same one to two threads."""
from __future__ import annotations

import copy
import pickle
import threading

import torch

from feedline.transforms.scratch import Scratch


def test_the_same_tensor_comes_back_while_it_fits_and_a_new_one_when_not():
    scratch, x = Scratch(), torch.zeros(4, 3, 8, 8)
    first = scratch.like(x)
    assert first.shape == x.shape and first.stride() == x.stride()
    assert scratch.like(x).data_ptr() == first.data_ptr()
    last = scratch.like(x.contiguous(memory_format=torch.channels_last))
    assert last.is_contiguous(memory_format=torch.channels_last) and last.data_ptr() != first.data_ptr()
    assert scratch.like(x[:2]).shape == (2, 3, 8, 8)
    assert scratch.like(x.double()).dtype == torch.float64
    mask = scratch.empty((4, 1, 8, 8), torch.float32, "cpu")
    assert mask.is_contiguous() and scratch.empty((4, 1, 8, 8), torch.float32, "cpu").data_ptr() == mask.data_ptr()


def test_threads_get_tensors_of_their_own():
    scratch, x = Scratch(), torch.zeros(2, 3, 4, 4)
    mine, theirs = scratch.like(x), []
    t = threading.Thread(target=lambda: theirs.append(scratch.like(x)))
    t.start()
    t.join()
    assert theirs[0].data_ptr() != mine.data_ptr()
    assert scratch.like(x).data_ptr() == mine.data_ptr()


def test_a_copied_or_pickled_scratch_starts_empty():
    scratch, x = Scratch(), torch.zeros(2, 3, 4, 4)
    kept = scratch.like(x)
    for other in (copy.deepcopy(scratch), pickle.loads(pickle.dumps(scratch))):
        assert isinstance(other, Scratch) and other.like(x).data_ptr() != kept.data_ptr()
