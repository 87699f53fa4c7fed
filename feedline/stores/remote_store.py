"""Shards in a bucket, read as one data set through the local shard cache.

Opening fetches the index and each shard's head (its columns, a small object beside the
shard), never the shards: a shard is fetched whole into the cache the first time one of
its records is read, or earlier by the fetch-ahead thread, which follows the visit order
the loader announces (``will_visit``). So a rank reading only its own shards fetches only
those. Records read are copies, so a shard the reader has moved past can be closed (and
its cache file evicted) while other threads still hold records of it.
"""
from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import threading
import weakref

import numpy as np

from ..errors import ChecksumError, StoreError
from ..format import parse_shard_index
from .base import Store
from .detect import open_file
from .remote import Bucket, MissingObjectError, RemoteOptions
from .shard_cache import ShardCache, ShardDamaged
from .shard_fetcher import ShardFetcher
from .shard_head import HEAD_SUFFIX, head_bytes, parse_head
from .sharded_store import ShardedStore, check_alike, check_against_index

log = logging.getLogger(__name__)
_shards: "weakref.WeakSet[LazyShard]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # A lock a thread of the parent held at the fork would stay held here: each shard a new one.
    for shard in list(_shards):
        shard._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def open_remote(url: str, options: RemoteOptions | None = None) -> "RemoteShardedStore":
    """The sharded data set whose index is the object ``url`` (s3://bucket/train.shards.json)."""
    options = options or RemoteOptions.from_env()
    bucket, key = Bucket.of(url, options)
    if not key.endswith(".json"):
        raise StoreError(f"{url}: a remote data set is opened by its shard index (OUT.shards.json), "
                         "as `feedline pack SRC URL --num-shards N` uploads it")
    index = parse_shard_index(bucket.read(key), url)
    tag = hashlib.sha256(f"{url}\n{index.get('pack_id')}".encode()).hexdigest()[:16]
    cache = ShardCache(os.path.join(options.cache_root, f"{bucket.name}-{tag}"), options.cache_limit)
    fetcher = ShardFetcher(bucket, posixpath.dirname(key), cache, options)
    try:
        shards = [_lazy_shard(fetcher, entry, index) for entry in index["shards"]]
        check_alike(shards)
        check_against_index(shards, index, url)
    except BaseException:   # its service thread ends with it
        fetcher.close()
        raise
    return RemoteShardedStore(shards, url, index, fetcher)


class LazyShard(Store):
    """One remote shard: its columns from its head; its records from the cached file,
    fetched on the first read. Thread-safe; ``release`` closes the file once no read is in flight."""

    def __init__(self, name: str, url: str, kind: str, size: int | None, head: tuple, fetcher: ShardFetcher):
        self.name, self.filename, self.kind, self.size_bytes = name, url, kind, size
        self.meta, self.columns, self._targets, self._lengths = head
        self.classes = list(self.meta["classes"])
        self._fetcher = fetcher
        self._lock = threading.Lock()
        _shards.add(self)
        self._local: Store | None = None
        self._reading = 0
        self._retired: list[Store] = []

    def read(self, index: int):
        return self._from_local(index, "read")

    def read_mask(self, index: int):
        return self._from_local(index, "read_mask")

    def _from_local(self, index: int, method: str):
        with self._lock:
            if self._local is None:
                self._local = self._fetcher.open_local(self)
            local = self._local
            self._reading += 1
        try:
            return bytes(getattr(local, method)(index))   # a copy: the file may be closed once this returns
        finally:
            with self._lock:
                self._reading -= 1

    def byte_lengths(self) -> np.ndarray:
        return self._lengths   # from the head: nothing fetched

    def release(self) -> None:
        """Close the cached file if no read is in flight (reads after this open it again)."""
        with self._lock:
            if self._local is not None and self._reading == 0:
                self._local.close()
                self._local = None

    def refetch(self) -> None:
        """Drop the cached copy (found damaged) so that the next read fetches the shard again."""
        with self._lock:
            if self._local is not None:
                self._retired.append(self._local)   # a read may still be inside it: closed with the shard
                self._local = None
            self._fetcher.cache.discard(self.name)

    def close(self) -> None:
        with self._lock:
            for store in [*self._retired, *([self._local] if self._local is not None else [])]:
                store.close()
            self._local, self._retired = None, []


class RemoteShardedStore(ShardedStore):
    """A ShardedStore of LazyShards that fetches ahead along the announced visit order and
    fetches a shard again once when one of its records fails its checksum."""

    def __init__(self, shards: list[LazyShard], url: str, index: dict, fetcher: ShardFetcher):
        super().__init__(shards, url, index)
        self._fetcher = fetcher

    @property
    def cache(self) -> ShardCache:
        return self._fetcher.cache

    def file_bytes(self) -> int:
        sizes = [s.size_bytes for s in self._stores]
        return sum(sizes) if None not in sizes else 0   # an index from elsewhere may not say

    def will_visit(self, indices) -> None:
        shard_of = np.searchsorted(np.asarray(self._starts), np.asarray(indices, dtype=np.int64), side="right") - 1
        _, first = np.unique(shard_of, return_index=True)
        order = shard_of[np.sort(first)].tolist()
        self._fetcher.follow([self._stores[k] for k in order])

    def read_checked(self, index: int):
        try:
            return super().read_checked(index)
        except ChecksumError as exc:
            shard, _ = self._locate(self._check(index))
            log.warning("%s; fetching shard %s again", exc, shard.filename)
            shard.refetch()
            try:
                return super().read_checked(index)
            except ChecksumError as again:
                raise ChecksumError(f"{again}; it differs again after fetching {shard.filename} a second time: "
                                    "the object in the bucket is damaged. Pack and upload it again "
                                    "(`feedline pack SRC URL --resume`)", again.filename, again.index,
                                    again.path) from None

    def close(self) -> None:
        self._fetcher.close()
        super().close()


def _lazy_shard(fetcher: ShardFetcher, entry: dict, index: dict) -> "LazyShard":
    name = entry["file"]
    url = fetcher.bucket.url(fetcher.key(name))
    shard = LazyShard(name, url, index.get("kind", "lmdb"), entry.get("bytes"), _head(fetcher, name, url), fetcher)
    fetcher.adopt(shard)
    return shard


def _head(fetcher: ShardFetcher, name: str, url: str) -> tuple:
    """The shard's head: from the cache, from the bucket, or (a data set uploaded otherwise)
    made from the shard itself, fetched whole once."""
    cache, bucket = fetcher.cache, fetcher.bucket
    cached = cache.path(name + HEAD_SUFFIX)
    if os.path.exists(cached):
        with open(cached, "rb") as fh:
            return parse_head(fh.read(), cached)
    try:
        raw = bucket.read(fetcher.key(name + HEAD_SUFFIX))
    except MissingObjectError:
        log.warning("%s: no head beside the shard (not uploaded by `feedline pack SRC URL`): fetching the shard "
                    "to read its columns", url)
        path = cache.get(name, None, lambda dest: bucket.download(fetcher.key(name), dest), _check_own_checksums)
        with open_file(path) as store:
            raw = head_bytes(store)
    tmp = f"{cached}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(raw)
    os.replace(tmp, cached)
    return parse_head(raw, url)


def _check_own_checksums(path: str) -> None:
    """A shard fetched without its head: every record against the checksums it stores."""
    try:
        store = open_file(path)
    except StoreError as exc:
        raise ShardDamaged(f"the fetched file does not open ({exc})") from None
    with store:
        for i in range(len(store)):
            try:
                store.read_checked(i)
            except ChecksumError as exc:
                raise ShardDamaged(str(exc)) from None
