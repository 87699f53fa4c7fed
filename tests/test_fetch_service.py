"""A remote store opened in one process and read in a process forked from it (a worker of
engine="processes"): the child never fetches through obstore, whose client does not survive
a fork; the opener fetches for it, and the child reads the same records."""
from __future__ import annotations

import gc
import hashlib
import json
import threading

import pytest
from process_helpers import in_child

from feedline.stores import RemoteOptions, open_dataset
from feedline.stores.remote import Bucket, RemoteError

pytestmark = pytest.mark.s3


def services() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("feedline-fetch-")]


def digests(store) -> list[str]:
    return [hashlib.sha1(bytes(store.read_checked(i))).hexdigest() for i in range(len(store))]


def test_a_forked_child_reads_every_shard_through_the_opener(uploaded, s3_env, tmp_path):
    url, local_index = uploaded
    gc.collect()   # stores other tests dropped: their services end with them
    serving = set(services())
    with open_dataset(local_index) as local:
        expected = digests(local)
    options = RemoteOptions(cache_dir=str(tmp_path / "cold"))
    store = open_dataset(url, remote=options)
    bucket, key = Bucket.of(url, options)
    assert bucket.read(key)   # the client works here, before the fork
    try:
        assert store.cache.fetched == []   # opening fetched the heads only

        def work() -> bytes:
            try:
                bucket.read(key)
                refused = ""
            except RemoteError as exc:
                refused = str(exc)
            return json.dumps({"digests": digests(store), "refused": refused}).encode()

        code, out = in_child(work)
        assert code == 0, out
        child = json.loads(out)
        assert child["digests"] == expected
        assert "forked from the one that opened the bucket" in child["refused"]   # never a hang
        # The opener fetched every shard the child read, each once.
        assert sorted(store.cache.fetched) == sorted(f.rsplit("/", 1)[-1] for f in store.shard_files)
    finally:
        store.close()
    assert set(services()) <= serving   # closing the store ended and joined its service's threads
