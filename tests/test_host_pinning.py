"""Pinning a shared mapping in place (feedline/sources/host_pinning.py): registered while a
tensor over it lives, unregistered once, after the last one and before the unmapping; a
refusal leaves pageable memory with one warning."""
from __future__ import annotations

import gc
import logging
import mmap
import weakref

import numpy as np
import pytest
import torch

from feedline.sources.host_pinning import HostPinning, when_unused

LOGGER = "feedline.sources.host_pinning"


def test_the_callback_runs_once_after_the_last_tensor_while_the_mapping_is_still_mapped():
    memory = mmap.mmap(-1, 4096)
    mapping = weakref.ref(memory)
    rows = np.frombuffer(memory, dtype=np.uint8, count=4096)
    calls = []
    when_unused(rows, lambda: calls.append(mapping() is not None and not mapping().closed))
    flat = torch.from_numpy(rows)
    del memory, rows
    view = flat[8:].view(torch.int32)          # views and numpy arrays over the tensor keep it
    array = flat.view(2, 2048).numpy()
    del flat, view
    gc.collect()
    assert calls == []
    array[1, 5] = 7                            # still the mapping's memory, still writable
    del array
    gc.collect()
    assert calls == [True]                     # once, and the mapping was alive when it ran
    assert mapping() is None                   # unmapped right after


@pytest.mark.skipif(torch.cuda.is_available(), reason="the path for a machine without CUDA")
def test_without_cuda_the_memory_stays_pageable_with_one_warning(caplog):
    pinning = HostPinning("cuda")
    first, second = mmap.mmap(-1, 4096), mmap.mmap(-1, 4096)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        a = pinning.tensor(first, 4096)
        b = pinning.tensor(second, 4096)
    assert pinning.refused and [r.levelname for r in caplog.records if r.name == LOGGER] == ["WARNING"]
    assert not torch.cuda.is_initialized()
    a[3] = 9
    assert first[3] == 9 and b.shape == (4096,)   # a view of the mapping, not a copy
    del a, b


@pytest.mark.cuda
def test_registered_while_used_and_unregistered_after_the_last_tensor():
    memory = mmap.mmap(-1, 1 << 20)
    pinning = HostPinning("cuda")
    flat = pinning.tensor(memory, 1 << 20)
    assert flat.is_pinned() and not pinning.refused
    address = flat.data_ptr()
    half = flat[: 1 << 19]
    del flat
    gc.collect()
    assert half.is_pinned()
    del half
    gc.collect()
    # the test's own reference keeps the mapping: the range is mapped, and no longer registered
    assert not torch.frombuffer(memory, dtype=torch.uint8).is_pinned()
    cudart = torch.cuda.cudart()
    assert int(cudart.cudaHostRegister(address, 1 << 20, 0)) == 0   # it would fail if still registered
    assert int(cudart.cudaHostUnregister(address)) == 0


@pytest.mark.cuda
def test_a_refused_registration_warns_once_and_leaves_no_cuda_error_behind(caplog):
    memory = mmap.mmap(-1, 1 << 16)
    pinned = HostPinning("cuda").tensor(memory, 1 << 16)
    again = HostPinning("cuda")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        twice = again.tensor(memory, 1 << 16)   # the range is registered already: refused
    assert again.refused and len([r for r in caplog.records if r.name == LOGGER]) == 1
    # the refusal's error was read off: PyTorch's next kernel-launch check does not raise it
    assert torch.ones(4, device="cuda").add_(1).sum().item() == 8
    assert torch.equal(twice.cuda(non_blocking=True).cpu(), pinned.cpu())
    del pinned, twice
