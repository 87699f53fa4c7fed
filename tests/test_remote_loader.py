"""FeedLoader over a bucket: shard order by default, exact mid-epoch resume, the cache bounded."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from feedline import FeedLoader
from feedline.stores import RemoteOptions, open_dataset

pytestmark = pytest.mark.s3

OPTIONS = dict(batch_size=5, train=True, size=32, num_threads=1, device="cpu", seed=3)


def batches(loader, skip: int = 0):
    out = []
    for k, (images, labels) in enumerate(loader):
        if k >= skip:
            out.append((images.clone(), labels.clone()))
    return out


def test_a_bucket_reads_in_shard_order_and_resumes_mid_epoch_exactly(uploaded, s3_env):
    url, _ = uploaded
    with FeedLoader(url, **OPTIONS, rank=1, world_size=2) as loader:
        assert loader.config.order.value == "shards"
        loader.set_epoch(1)
        whole = batches(loader)
        loader.set_epoch(1)
        it = iter(loader)
        for _ in range(2):
            next(it)
        state = loader.state_dict()
        it.close()
    with FeedLoader(url, **OPTIONS, rank=1, world_size=2) as resumed:
        resumed.load_state_dict(state)
        resumed.set_epoch(1)
        rest = batches(resumed)
    assert len(whole) == len(resumed) == 5 and len(rest) == 3
    for (a, la), (b, lb) in zip(whole[2:], rest, strict=True):
        assert torch.equal(a, b) and torch.equal(la, lb)


def test_the_cache_stays_within_its_limit_over_an_epoch(uploaded, s3_env, tmp_path):
    url, _ = uploaded
    options = RemoteOptions(cache_dir=str(tmp_path / "c"), cache_limit=1, fetch_ahead=1)
    store = open_dataset(url, remote=options)
    sizes = store.byte_lengths()
    with FeedLoader(store, **OPTIONS, order="shards", rank=0, world_size=1) as loader:
        seen = sum(len(labels) for _, labels in loader)
    assert seen == len(sizes)
    files = [f for f in os.listdir(store.cache.folder) if f.endswith(".lmdb")]
    # A limit below one shard keeps only the shards in use: the window (2) and the one fetched ahead.
    assert len(files) <= 3 and sorted(store.cache.fetched) == sorted(os.path.basename(f) for f in store.shard_files)
    assert np.all(sizes > 0)


def test_closing_the_loader_ends_the_fetch_ahead_thread(uploaded, s3_env):
    import threading
    url, _ = uploaded
    with FeedLoader(url, **OPTIONS, rank=0, world_size=2) as loader:
        next(iter(loader))
    assert not [t for t in threading.enumerate() if t.name == "feedline-fetch-ahead"]
