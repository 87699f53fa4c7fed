"""FeedLoader over a bucket: shard order by default, exact mid-epoch resume, the cache bounded."""
from __future__ import annotations

import logging
import os

import pytest
import torch

from feedline import FeedLoader
from feedline.core.config import OrderSpec
from feedline.stores import RemoteOptions, open_dataset

pytestmark = pytest.mark.s3

OPTIONS = dict(batch_size=5, train=True, size=32, num_workers=1, device="cpu", seed=3)


def batches(loader, skip: int = 0):
    out = []
    for k, (images, labels) in enumerate(loader):
        if k >= skip:
            out.append((images.clone(), labels.clone()))
    return out


def test_a_bucket_reads_in_shard_order_and_resumes_mid_epoch_exactly(uploaded, s3_env):
    url, _ = uploaded
    with FeedLoader(url, **OPTIONS, order=OrderSpec(rank=1, world_size=2)) as loader:
        assert loader.config.order.value == "shards"
        loader.set_epoch(1)
        whole = batches(loader)
        loader.set_epoch(1)
        it = iter(loader)
        for _ in range(2):
            next(it)
        state = loader.state_dict()
        it.close()
    with FeedLoader(url, **OPTIONS, order=OrderSpec(rank=1, world_size=2)) as resumed:
        resumed.load_state_dict(state)
        resumed.set_epoch(1)
        rest = batches(resumed)
    assert len(whole) == len(resumed) == 5 and len(rest) == 3
    for (a, la), (b, lb) in zip(whole[2:], rest, strict=True):
        assert torch.equal(a, b) and torch.equal(la, lb)


def test_the_cache_stays_within_its_limit_over_an_epoch(photo_folder, s3_env, tmp_path):
    from converters import pack
    from tests.remote_helpers import make_bucket
    url = make_bucket(s3_env, "many") + "/twelve.lmdb"
    pack(str(photo_folder), url, num_shards=12, progress=False)
    options = RemoteOptions(cache_dir=str(tmp_path / "c"), cache_limit=1, fetch_ahead=1)
    store = open_dataset(url.replace(".lmdb", ".shards.json"), remote=options)
    with FeedLoader(store, **OPTIONS, order=OrderSpec("shards", rank=0, world_size=1)) as loader:
        seen = sum(len(labels) for _, labels in loader)
    assert seen == len(store) == 48
    # A limit below one shard keeps only the shards in use: the reader's window of 2, the
    # window before it (batches in flight) and the one fetched ahead. Each shard fetched once.
    assert sorted(store.cache.fetched) == sorted(os.path.basename(f) for f in store.shard_files)
    files = [f for f in os.listdir(store.cache.folder) if f.endswith(".lmdb")]
    assert len(files) <= 5
    assert store.cache.peak_bytes <= sum(sorted(s.size_bytes for s in store.stores)[-6:])   # and one arriving


def test_closing_the_loader_ends_the_fetch_ahead_thread(uploaded, s3_env):
    import threading
    url, _ = uploaded
    with FeedLoader(url, **OPTIONS, order=OrderSpec(rank=0, world_size=2)) as loader:
        next(iter(loader))
    assert not [t for t in threading.enumerate() if t.name == "feedline-fetch-ahead"]


@pytest.mark.parametrize("warm", [False, True], ids=["cold-cache", "warm-cache"])
def test_worker_processes_read_a_bucket_as_the_threads_do(uploaded, s3_env, tmp_path, warm):
    """engine="processes": the workers read the same remote store through the same shard cache
    (cold: the shards are fetched as the workers reach them, beside the fetch-ahead thread;
    warm: every shard already there), and every batch equals the thread engine's."""
    url, _ = uploaded
    options = dict(OPTIONS, num_workers=2, order=OrderSpec(rank=0, world_size=1), decoder="opencv")
    with FeedLoader(url, **options, engine="threads") as threads:
        expected = batches(threads)
    cache = RemoteOptions(cache_dir=str(tmp_path / ("warm" if warm else "cold")))
    if warm:
        with FeedLoader(open_dataset(url, remote=cache), **options, engine="threads") as filling:
            batches(filling)
    store = open_dataset(url, remote=cache)
    with FeedLoader(store, **options, engine="processes") as workers:
        assert workers.config.order.value == "shards"
        got = batches(workers)
        workers.set_epoch(1)
        assert len(batches(workers)) == len(expected)   # and a second epoch, with the same workers
    # The workers never fetch (obstore's client does not survive a fork): the loader's process
    # fetched each shard once for them, or none when the cache had them all.
    shards = sorted(os.path.basename(f) for f in store.shard_files)
    assert sorted(store.cache.fetched) == ([] if warm else shards)
    assert len(got) == len(expected) == 10
    for (a, la), (b, lb) in zip(got, expected, strict=True):
        assert torch.equal(a, b) and torch.equal(la, lb)


@pytest.fixture(scope="module")
def twelve(s3_server, photo_folder, tmp_path_factory):
    """photo_folder in 12 shards in a bucket, and the same 12 shards packed locally: (URL, local index)."""
    from converters import pack
    from tests.remote_helpers import make_bucket
    work = tmp_path_factory.mktemp("twelve")
    with pytest.MonkeyPatch.context() as mp:
        for name, value in s3_server.env().items():
            mp.setenv(name, value)
        mp.setenv("XDG_CACHE_HOME", str(work / "upload-cache"))
        prefix = make_bucket(s3_server, "twelve")
        pack(str(photo_folder), f"{prefix}/set.lmdb", num_shards=12, progress=False)
    pack(str(photo_folder), str(work / "local" / "set.lmdb"), num_shards=12, progress=False)
    return f"{prefix}/set.shards.json", str(work / "local" / "set.shards.json")


def test_worker_processes_over_a_bounded_cache_deliver_every_record_once_per_epoch(twelve, s3_env, tmp_path,
                                                                                  caplog):
    """Two workers, a cache limit of seven shards of twelve, two epochs: every batch equals the
    one read from a local copy of the same shards, and the cache folder never holds more than
    its limit, sampled all along (shards arriving counted whole, as the cache counts them)."""
    import threading
    import time
    url, local = twelve
    with open_dataset(local) as reference:
        sizes = [os.path.getsize(f) for f in reference.files()]
        count = len(reference)
    limit = sum(sorted(sizes)[-7:])
    assert limit < sum(sizes)
    options = dict(batch_size=5, train=True, size=32, seed=3, device="cpu", decoder="opencv",
                   order=OrderSpec("shards", rank=0, world_size=1))
    expected = {}
    with FeedLoader(local, **options, num_workers=0) as loader:
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            expected[epoch] = batches(loader)
    store = open_dataset(url, remote=RemoteOptions(cache_dir=str(tmp_path / "c"), cache_limit=limit))
    held, done = [0], threading.Event()

    def watch() -> None:
        while not done.is_set():
            held[0] = max(held[0], store.cache.used_bytes())
            time.sleep(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with FeedLoader(store, **options, num_workers=2, engine="processes") as loader:
            for epoch in (0, 1):
                loader.set_epoch(epoch)
                got = batches(loader)
                assert sum(len(labels) for _, labels in got) == count
                assert len(got) == len(expected[epoch])
                for (a, la), (b, lb) in zip(got, expected[epoch], strict=True):
                    assert torch.equal(a, b) and torch.equal(la, lb)
    finally:
        done.set()
        watcher.join()
        store.close()
    assert 0 < held[0] <= limit
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
