"""Shards in a real S3 bucket (SeaweedFS on 127.0.0.1): packed to it, read back through the cache."""
from __future__ import annotations

import os

import numpy as np
import pytest

from feedline.core.errors import StoreError
from feedline.stores import RemoteOptions, is_remote, open_dataset
from tests.process_helpers import fork_storm
from tests.remote_helpers import records

pytestmark = pytest.mark.s3


def test_pack_to_bucket_reads_back_the_same_records(uploaded, s3_env, tmp_path):
    url, local_index = uploaded
    with open_dataset(url) as remote, open_dataset(local_index) as local:
        assert is_remote(remote) and not is_remote(local)
        assert remote.shard_counts() == local.shard_counts()
        assert remote.classes == local.classes
        np.testing.assert_array_equal(remote.byte_lengths(), local.byte_lengths())
        assert records(remote) == records(local)
        for i in range(len(remote)):
            assert bytes(remote.read_checked(i)) == bytes(local.read(i))


def test_opening_fetches_heads_only_and_a_read_fetches_one_shard(uploaded, s3_env, tmp_path):
    url, _ = uploaded
    with open_dataset(url, remote=RemoteOptions(fetch_ahead=0)) as store:
        assert store.cache.fetched_bytes == 0
        store.read(0)
        shard0 = store.cache.path(os.path.basename(store.shard_files[0]))
        assert store.cache.fetched_bytes == os.path.getsize(shard0)
        assert [os.path.exists(store.cache.path(os.path.basename(f))) for f in store.shard_files] == \
            [True, False, False, False]


def test_a_complete_cached_shard_is_never_fetched_again(uploaded, s3_env):
    url, _ = uploaded
    with open_dataset(url) as store:
        store.read(0)
    with open_dataset(url) as again:
        again.read(0)
        assert again.cache.fetched_bytes == 0


def test_unsupported_schemes_are_refused_in_one_line():
    for url in ("gs://bucket/x.shards.json", "http://host/x.lmdb", "file:///tmp/x.lmdb"):
        with pytest.raises(StoreError, match=r"does not read .*://.*reads local paths and s3://") as info:
            open_dataset(url)
        assert "\n" not in str(info.value)


@pytest.mark.slow
def test_two_hundred_forks_taken_while_threads_read_a_bucket_never_hang_a_child(uploaded, s3_env):
    """Told before the forks, the opener fetches for its children; a child never touches the
    opener's locks, sockets or cached files' handles, whatever its threads were doing."""
    url, _ = uploaded
    counts = fork_storm(url, 200, env=dict(os.environ))
    assert counts == {"forked": 200, "hung": 0, "wrong": 0, "failed": 0, "problems": []}


def test_a_user_chooses_the_cache_with_the_environment_and_the_options_win(uploaded, s3_env, tmp_path, monkeypatch):
    """What docs/remote.md tells users: FEEDLINE_CACHE_DIR and FEEDLINE_CACHE_LIMIT, read where the
    data set is opened (FeedLoader, the CLI), unless RemoteOptions says otherwise."""
    from feedline import FeedLoader
    url, _ = uploaded
    monkeypatch.setenv("FEEDLINE_CACHE_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("FEEDLINE_CACHE_LIMIT", "3MiB")
    with FeedLoader(url, batch_size=8, size=32, num_workers=0, device="cpu") as loader:
        next(iter(loader))
        cache = loader.store.cache
        assert cache.folder.startswith(str(tmp_path / "env") + os.sep) and cache.limit == 3 * 2**20
    with open_dataset(url, remote=RemoteOptions(cache_dir=str(tmp_path / "given"))) as store:
        assert store.cache.folder.startswith(str(tmp_path / "given") + os.sep) and store.cache.limit == 3 * 2**20
