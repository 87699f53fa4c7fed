"""The worker engine's ring (feedline/sources/shared_ring.py): host Slots are plain views of
their arenas; for a CUDA Finisher the arenas are pinned in place and the batches are the
thread engine's."""
from __future__ import annotations

import logging

import pytest
import torch

from feedline import FeedLoader

LOGGER = "feedline.sources.host_pinning"
OPTIONS = dict(batch_size=6, shuffle=True, train=True, size=40, seed=3, decoder="simplejpeg")


def epoch(path, engine: str, device: str, inspect=None):
    with FeedLoader(str(path), engine=engine, num_workers=2, device=device, **OPTIONS) as loader:
        out = [(x.clone(), y.clone()) for x, y in loader]
        if inspect is not None:
            inspect(loader.source)
    return out


def test_host_slots_are_unpinned_views_of_their_arenas_and_cuda_is_not_touched(packed_lmdb, caplog):
    seen = {}

    def inspect(source):
        slot = source.shared.ring.slot(0)
        seen.update(pinning=source.pinning, images=slot.images, labels=slot.labels)

    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        epoch(packed_lmdb, "processes", "cpu", inspect)
    assert seen["pinning"] is None and [r for r in caplog.records if r.name == LOGGER] == []
    assert not torch.cuda.is_initialized()
    assert not seen["images"].is_pinned() and not seen["labels"].is_pinned()
    assert seen["images"].shape == (6, 3, 40, 40)   # the consumer's batch, written by the workers into the arena


@pytest.mark.cuda
def test_on_cuda_the_arenas_are_pinned_and_the_batches_are_the_thread_engines(packed_lmdb, caplog):
    seen = {}

    def inspect(source):
        slot = source.shared.ring.slot(0)
        seen.update(images=slot.images.is_pinned(), labels=slot.labels.is_pinned(), refused=source.pinning.refused)

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        processes = epoch(packed_lmdb, "processes", "cuda", inspect)
    threads = epoch(packed_lmdb, "threads", "cuda")
    assert seen == {"images": True, "labels": True, "refused": False}
    assert [r for r in caplog.records if r.name == LOGGER] == []
    assert len(processes) == len(threads) == 8
    for (x, y), (tx, ty) in zip(processes, threads, strict=True):
        assert x.is_cuda and torch.equal(x, tx) and torch.equal(y, ty)
