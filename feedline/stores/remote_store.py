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

import numpy as np

from ..core.errors import ChecksumError, StoreError, UnavailableError
from ..dataset.format import parse_shard_index
from .base import Store
from .detect import open_file
from .process_local import ProcessLocal
from .remote import Bucket, MissingObjectError, RemoteOptions
from .shard_cache import ShardCache, ShardDamaged
from .shard_fetcher import ShardFetcher
from .shard_head import HEAD_SUFFIX, head_bytes, parse_head
from .sharded_store import ShardedStore, check_alike, check_against_index

log = logging.getLogger(__name__)


def open_remote(url: str, options: RemoteOptions) -> "RemoteShardedStore":
    """The sharded data set whose index is the object ``url`` (s3://bucket/train.shards.json);
    ``options`` with the cache chosen (`from_environment`)."""
    bucket, key = Bucket.of(url, options)
    if not key.endswith(".json"):
        raise StoreError(f"{url}: a remote data set is opened by its shard index (OUT.shards.json), "
                         "as `feedline pack SRC URL --num-shards N` uploads it")
    index = parse_shard_index(bucket.read(key), url)
    tag = hashlib.sha256(f"{url}\n{index.get('pack_id')}".encode()).hexdigest()[:16]
    cache = ShardCache(os.path.join(options.cache_root, f"{bucket.name}-{tag}"), options.cache_limit,
                       wait_s=2 * options.fetch_budget_s)
    fetcher = ShardFetcher(bucket, posixpath.dirname(key), cache, options)
    try:
        shards = [_lazy_shard(fetcher, entry, index) for entry in index["shards"]]
        check_alike(shards)
        check_against_index(shards, index, url)
    except BaseException:   # its service thread ends with it
        fetcher.close()
        raise
    return RemoteShardedStore(shards, url, index, fetcher)


class _Opened:
    """A shard's cached file as one process reads it: opened at the first read, closed by
    ``release`` once no read is in flight; copies found damaged are retired, closed with it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.local: Store | None = None
        self.reading = 0
        self.retired: list[Store] = []

    def close(self) -> None:
        with self.lock:
            stores = [*self.retired, *([self.local] if self.local is not None else [])]
            self.local, self.retired = None, []
        for store in stores:
            store.close()


class LazyShard(Store):
    """One remote shard: its columns from its head; its records from the cached file,
    fetched on the first read. Thread-safe; ``release`` closes the file once no read is in
    flight. A cached copy that fails to open or read (damage anywhere in it: a checksum
    mismatch is found by ``read_checked``) is fetched again once."""

    def __init__(self, name: str, url: str, kind: str, size: int | None, head: tuple, fetcher: ShardFetcher):
        self.name, self.filename, self.kind, self.size_bytes = name, url, kind, size
        self.meta, self.columns, self._targets, self._lengths = head
        self.classes = list(self.meta["classes"])
        self._fetcher = fetcher
        self._opened: ProcessLocal[_Opened] = ProcessLocal(_Opened, _Opened.close)

    def read(self, index: int):
        return self._fetched(index, "read")

    def read_mask(self, index: int):
        return self._fetched(index, "read_mask")

    def _fetched(self, index: int, method: str):
        """``method`` (read, read_mask) of the cached shard; a damaged copy is fetched again once."""
        try:
            return self._read(index, method)
        except UnavailableError:
            raise
        except StoreError as exc:
            log.warning("%s; the cached copy of %s is damaged: fetching it again", exc, self.filename)
        self.refetch()
        try:
            return self._read(index, method)
        except UnavailableError:
            raise
        except StoreError as exc:
            raise StoreError(f"{exc}; again after fetching {self.filename} a second time (the fetched copy "
                             "checked out): the cache's disk may be failing") from None

    def _read(self, index: int, method: str):
        opened = self._opened.get()
        with opened.lock:
            local = opened.local
            opened.reading += local is not None
        if local is None:   # opened (fetched) outside the lock: the cache makes one fetch of many wait
            local = self._fetcher.open_local(self)
            with opened.lock:
                if opened.local is None:
                    opened.local = local
                else:   # another thread opened it meanwhile: one serves
                    local.close()
                    local = opened.local
                opened.reading += 1
        try:
            return bytes(getattr(local, method)(index))   # a copy: the file may be closed once this returns
        finally:
            with opened.lock:
                opened.reading -= 1

    def byte_lengths(self) -> np.ndarray:
        return self._lengths   # from the head: nothing fetched

    def release(self) -> None:
        """Close the cached file if no read is in flight (reads after this open it again)."""
        opened = self._opened.peek()
        if opened is None:
            return
        with opened.lock:
            local = opened.local if opened.reading == 0 else None
            if local is not None:
                opened.local = None
        if local is not None:
            local.close()

    def refetch(self) -> None:
        """Drop the cached copy (found damaged) so that the next read fetches the shard again."""
        opened = self._opened.get()
        with opened.lock:
            if opened.local is not None:
                opened.retired.append(opened.local)   # a read may still be inside it: closed with the shard
                opened.local = None
        self._fetcher.cache.discard(self.name)

    def close(self) -> None:
        opened = self._opened.take()
        if opened is not None:
            opened.close()


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

    def before_fork(self) -> None:
        """Start the service through which the forked children's reads are fetched here."""
        self._fetcher.serve_children()

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
    try:
        with open(cached, "rb") as fh:
            return parse_head(fh.read(), cached)
    except FileNotFoundError:
        pass
    except StoreError as exc:
        log.warning("%s; fetching it again", exc)
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
