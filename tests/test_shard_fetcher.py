"""Fetching ahead: once the reader's visit order is announced, the first window and the shards
ahead of it arrive in the cache before any record is read, in that order, and no others."""
from __future__ import annotations

import os
import time

import pytest

from feedline.planning.order import SHARD_WINDOW
from feedline.stores import RemoteOptions, open_dataset, will_visit

pytestmark = pytest.mark.s3


def test_the_announced_shards_are_fetched_ahead_of_the_reader(uploaded, s3_env, tmp_path):
    url, _ = uploaded
    store = open_dataset(url, remote=RemoteOptions(cache_dir=str(tmp_path / "c"), fetch_ahead=1))
    counts = store.shard_counts()
    visit = [3, 1, 0, 2]                                   # shards in the order the reader will read them
    starts = [sum(counts[:k]) for k in range(len(counts))]
    will_visit(store, [starts[k] + i for k in visit for i in range(counts[k])])
    names = [os.path.basename(store.shard_files[k]) for k in visit]
    deadline = time.monotonic() + 20
    while len(store.cache.fetched) < SHARD_WINDOW + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)   # the thread now waits for the reader: nothing more arrives
    assert store.cache.fetched == names[:SHARD_WINDOW + 1]
    will_visit(store, ())                                  # nothing more: the thread ends
    assert not [n for n in names[SHARD_WINDOW + 1:] if store.cache.complete(n)]
    store.close()
