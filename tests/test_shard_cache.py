"""The local shard cache: complete files only, least-recently-used eviction past the limit,
one fetch per shard per machine (a lock file, waited for a bounded time, never held by a
child forked meanwhile), a copy of the wrong size fetched again, a full disk in one line."""
from __future__ import annotations

import fcntl
import multiprocessing
import os
import time

import pytest

from feedline.stores.remote import CacheFullError, RemoteError
from feedline.stores.shard_cache import ShardCache, ShardDamaged

SMALL_DISK = ("256k", "4m")
WAIT_S = 30.0


def writer(data: bytes):
    def fetch(dest: str) -> int:
        with open(dest, "wb") as fh:
            fh.write(data)
        return len(data)
    return fetch


def no_check(path: str) -> None:
    pass


def test_a_fetched_shard_is_checked_then_complete_and_not_fetched_again(tmp_path):
    cache = ShardCache(str(tmp_path), limit=1 << 20, wait_s=WAIT_S)
    seen = []
    path = cache.get("a.lmdb", 3, writer(b"abc"), seen.append)
    assert seen == [path + ".partial"] and open(path, "rb").read() == b"abc"
    assert cache.get("a.lmdb", 3, writer(b"xyz"), no_check) == path and open(path, "rb").read() == b"abc"
    assert cache.fetched == ["a.lmdb"] and cache.fetched_bytes == 3


def test_a_bad_fetch_leaves_nothing_behind(tmp_path):
    cache = ShardCache(str(tmp_path), limit=1 << 20, wait_s=WAIT_S)
    with pytest.raises(ShardDamaged, match="2 bytes arrived, the object has 3"):
        cache.get("a.lmdb", 3, writer(b"ab"), no_check)

    def refuse(path):
        raise ShardDamaged("record 0 fails its checksum")
    with pytest.raises(ShardDamaged, match="record 0"):
        cache.get("a.lmdb", 3, writer(b"abc"), refuse)
    assert not cache.complete("a.lmdb") and not os.path.exists(cache.path("a.lmdb") + ".partial")


def test_past_the_limit_the_least_recently_used_shards_go_first(tmp_path):
    cache = ShardCache(str(tmp_path), limit=300, wait_s=WAIT_S)
    for k, name in enumerate("abc"):
        cache.get(name, 100, writer(b"x" * 100), no_check)
        os.utime(cache.path(name), (1000 + k, 1000 + k))
    cache.get("a", 100, writer(b""), no_check)          # used again: now the most recent
    cache.get("d", 100, writer(b"x" * 100), no_check, keep={"b"})
    assert [cache.complete(n) for n in "abcd"] == [True, True, False, True]   # c: least recent not kept
    assert cache.used_bytes() <= 300 and cache.peak_bytes <= 300


def _get_in_child(folder: str, inherited_lock: int, out) -> None:
    os.close(inherited_lock)   # the parent's lock, copied by fork: it must stay the parent's alone
    cache = ShardCache(folder, limit=1 << 20, wait_s=WAIT_S)
    cache.get("s", 3, writer(b"new"), no_check)
    out.put(cache.fetched)


def test_a_second_process_waits_for_the_first_ones_fetch_instead_of_fetching(tmp_path):
    cache = ShardCache(str(tmp_path), limit=1 << 20, wait_s=WAIT_S)
    lock = os.open(cache.path("s") + ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)          # this process is "fetching" s
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_get_in_child, args=(str(tmp_path), lock, out))
    child.start()
    time.sleep(0.5)
    assert child.is_alive(), "the child did not wait on the lock"
    with open(cache.path("s"), "wb") as fh:
        fh.write(b"old")
    os.close(lock)
    child.join(10)
    assert out.get(timeout=5) == [] and open(cache.path("s"), "rb").read() == b"old"


def test_a_full_cache_disk_is_one_line_saying_what_to_do(small_disk):
    cache = ShardCache(str(small_disk.path / "cache"), limit=1 << 30, wait_s=WAIT_S)
    with pytest.raises(CacheFullError, match="cache disk is full; free space.*FEEDLINE_CACHE_DIR") as info:
        cache.get("big", None, writer(b"x" * (1 << 20)), no_check)
    assert "\n" not in str(info.value)
    assert [n for n in os.listdir(cache.folder) if not n.endswith(".lock")] == []   # no partial left


def test_a_cached_copy_of_the_wrong_size_is_fetched_again(tmp_path):
    cache = ShardCache(str(tmp_path), limit=1 << 20, wait_s=WAIT_S)
    path = cache.get("a", 3, writer(b"abc"), no_check)
    with open(path, "ab") as fh:
        fh.write(b"!")   # damaged in the cache: longer than the object
    assert cache.get("a", 3, writer(b"abc"), no_check) == path and open(path, "rb").read() == b"abc"
    assert cache.fetched == ["a", "a"]


def test_a_wait_for_another_fetch_is_bounded_and_says_whose_lock(tmp_path):
    cache = ShardCache(str(tmp_path), limit=1 << 20, wait_s=0.3)
    lock = os.open(cache.path("s") + ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)   # another fetch of s that never ends
    try:
        with pytest.raises(RemoteError) as info:
            cache.get("s", 3, writer(b"abc"), no_check)
    finally:
        os.close(lock)
    assert str(info.value) == (f"{cache.path('s')}.lock: waited 0 s for another fetch of this shard (this lock is "
                               "held): that process may be stopped or hung; end it, or remove the lock file if it "
                               "is gone")
    assert not cache.complete("s")


def test_what_runs_before_a_fetch_may_refuse_it(tmp_path):
    cache = ShardCache(str(tmp_path), limit=1 << 20, wait_s=WAIT_S)

    def refuse() -> None:
        raise RemoteError("the server did not answer a moment ago")
    with pytest.raises(RemoteError, match="a moment ago"):
        cache.get("s", 3, writer(b"abc"), no_check, before_fetch=refuse)
    assert cache.get("s", 3, writer(b"abc"), no_check) and cache.fetched == ["s"]


def _fetch_that_fails_late(cache: ShardCache, started, release) -> None:
    def fetch(dest: str) -> int:   # a child forked now copies the lock file, open and locked
        started.set()
        release.wait(10)
        raise ShardDamaged("it never arrived whole")
    with pytest.raises(ShardDamaged):
        cache.get("s", 3, fetch, no_check)


def test_a_child_forked_while_a_lock_is_held_does_not_keep_it(tmp_path):
    """A flock belongs to the open file, which a fork shares: unlocked before it is closed, it
    is free for others at once, whatever copies of the file forked children still hold."""
    import threading
    cache = ShardCache(str(tmp_path), limit=1 << 20, wait_s=WAIT_S)
    started, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=_fetch_that_fails_late, args=(cache, started, release))
    holder.start()
    started.wait(10)
    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=time.sleep, args=(30,))   # holds its copy of the lock file for 30 s
    child.start()
    try:
        release.set()
        holder.join()
        other = ShardCache(str(tmp_path), limit=1 << 20, wait_s=2)
        assert other.get("s", 3, writer(b"abc"), no_check) == cache.path("s")   # no wait for the child
    finally:
        child.kill()
        child.join()


def test_two_fetches_at_once_keep_the_cache_within_its_limit(tmp_path):
    """A shard arriving counts whole from the moment its room is made: a second fetch meanwhile
    evicts for both (it used to see the first one's few bytes and overshoot by a shard)."""
    import threading
    cache = ShardCache(str(tmp_path), limit=350, wait_s=WAIT_S)
    for k, name in enumerate("abc"):
        cache.get(name, 100, writer(b"x" * 100), no_check)
        os.utime(cache.path(name), (1000 + k, 1000 + k))
    arriving, release = threading.Event(), threading.Event()

    def slow(dest: str) -> int:
        with open(os.open(dest, os.O_WRONLY), "wb") as fh:   # as Bucket.download writes: over the reservation
            fh.write(b"y" * 10)
            arriving.set()
            release.wait(10)
            fh.write(b"y" * 90)
        return 100

    first = threading.Thread(target=cache.get, args=("d", 100, slow, no_check))
    first.start()
    arriving.wait(10)
    try:
        cache.get("e", 100, writer(b"z" * 100), no_check)
        assert cache.used_bytes() == 300   # c, e and d's room
        assert [cache.complete(n) for n in "abce"] == [False, False, True, True]   # the two least recent went
    finally:
        release.set()
        first.join()
    assert cache.complete("d") and cache.used_bytes() == 300
