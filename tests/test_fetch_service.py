"""A remote store opened in one process and read in a process forked from it (a worker of
engine="processes"): the child never fetches through obstore, whose client does not survive
a fork; the opener, told before the fork, fetches for it, and the child reads the same
records; each child's connection is closed when the child goes."""
from __future__ import annotations

import gc
import hashlib
import json
import os
import threading
import time

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
        store.before_fork()

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


def sockets() -> set[str]:
    """The sockets this process has open (their inodes)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            found.add(target)
    return found


def test_each_childs_connection_is_closed_when_the_child_goes_not_when_the_store_closes(uploaded, s3_env, tmp_path):
    url, _ = uploaded
    store = open_dataset(url, remote=RemoteOptions(cache_dir=str(tmp_path / "c")))
    try:
        store.before_fork()
        serving = sockets()   # the service's listener among them
        for k in range(3):   # three workers, each replaced by the next
            assert in_child(lambda: bytes(store.read(k)))[0] == 0
            deadline = time.monotonic() + 10
            while sockets() != serving and time.monotonic() < deadline:
                time.sleep(0.02)
            assert sockets() == serving, f"child {k} gone, its connection still open here"
    finally:
        store.close()


def test_a_child_forked_without_before_fork_is_told_what_to_do_and_never_waits(uploaded, s3_env, tmp_path):
    url, _ = uploaded
    with open_dataset(url, remote=RemoteOptions(cache_dir=str(tmp_path / "c"))) as store:
        code, out = in_child(lambda: bytes(store.read(0)))
    assert code == 1 and out.decode().startswith("RemoteError: ")
    assert out.decode().endswith("without store.before_fork() called there first: call it in the parent just "
                                 "before forking processes that will read this store")
