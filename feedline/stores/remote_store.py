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

from ..errors import ChecksumError, StoreError
from ..format import checksum, parse_shard_index
from ..order import SHARD_WINDOW
from .base import Store
from .detect import open_file
from .remote import Bucket, MissingObjectError, RemoteError, RemoteOptions
from .shard_cache import ShardCache, ShardDamaged
from .shard_head import HEAD_SUFFIX, head_bytes, parse_head
from .sharded_store import ShardedStore, check_alike, check_against_index

log = logging.getLogger(__name__)


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
    fetcher = _Fetcher(bucket, posixpath.dirname(key), cache, options)
    shards = [fetcher.shard(entry, index) for entry in index["shards"]]
    try:
        check_alike(shards)
        check_against_index(shards, index, url)
    except StoreError:
        fetcher.close()
        raise
    return RemoteShardedStore(shards, url, index, fetcher)


class LazyShard(Store):
    """One remote shard: its columns from its head; its records from the cached file,
    fetched on the first read. Thread-safe; ``release`` closes the file once no read is in flight."""

    def __init__(self, name: str, url: str, kind: str, size: int | None, head: tuple, fetcher: "_Fetcher"):
        self.name, self.filename, self.kind, self.size_bytes = name, url, kind, size
        self.meta, self.columns, self._targets, self._lengths = head
        self.classes = list(self.meta["classes"])
        self._fetcher = fetcher
        self._lock = threading.Lock()
        self._local: Store | None = None
        self._reading = 0
        self._retired: list[Store] = []

    def read(self, index: int):
        with self._lock:
            if self._local is None:
                self._local = self._fetcher.open_local(self)
            local = self._local
            self._reading += 1
        try:
            return bytes(local.read(index))   # a copy: the file may be closed once this returns
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

    def __init__(self, shards: list[LazyShard], url: str, index: dict, fetcher: "_Fetcher"):
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


class _Fetcher:
    """Fetches shards into the cache (checked), opens them, and runs the fetch-ahead thread."""

    def __init__(self, bucket: Bucket, prefix: str, cache: ShardCache, options: RemoteOptions):
        self.bucket, self.prefix, self.cache, self.options = bucket, prefix, cache, options
        self._cond = threading.Condition()
        self._sequence: list[LazyShard] = []
        self._position = 0            # the window of the sequence the reader is in
        self._thread: threading.Thread | None = None
        self._stop = False
        self._warned_heads = False

    def key(self, name: str) -> str:
        return posixpath.join(self.prefix, name) if self.prefix else name

    # -- opening -------------------------------------------------------------------------------
    def shard(self, entry: dict, index: dict) -> LazyShard:
        name = entry["file"]
        url = self.bucket.url(self.key(name))
        return LazyShard(name, url, index.get("kind", "lmdb"), entry.get("bytes"), self._head(name, url), self)

    def _head(self, name: str, url: str) -> tuple:
        cached = self.cache.path(name + HEAD_SUFFIX)
        if os.path.exists(cached):
            with open(cached, "rb") as fh:
                return parse_head(fh.read(), cached)
        try:
            raw = self.bucket.read(self.key(name + HEAD_SUFFIX))
        except MissingObjectError:
            if not self._warned_heads:
                log.warning("%s: no shard heads beside the shards (not uploaded by `feedline pack SRC URL`): "
                            "fetching every shard once to read its columns", url)
                self._warned_heads = True
            path = self.cache.get(name, None, lambda dest: self.bucket.download(self.key(name), dest),
                                  _check_own_checksums)
            with open_file(path) as store:
                raw = head_bytes(store)
        tmp = f"{cached}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(raw)
        os.replace(tmp, cached)
        return parse_head(raw, url)

    # -- fetching ------------------------------------------------------------------------------
    def fetch(self, shard: LazyShard) -> str:
        """The cached path of ``shard``, fetched and checked when not there; fetched once more
        when the first copy does not check out."""
        for attempt in (1, 2):
            try:
                return self.cache.get(shard.name, shard.size_bytes,
                                      lambda dest: self.bucket.download(self.key(shard.name), dest),
                                      lambda path: _check_shard(path, shard), keep=self._keep())
            except ShardDamaged as exc:
                if attempt == 2:
                    raise RemoteError(f"{shard.filename}: {exc}, again after fetching it a second time: the object "
                                     "in the bucket is damaged or was replaced. Pack and upload it again "
                                     "(`feedline pack SRC URL --resume`)") from None
                log.warning("%s: %s; fetching it again", shard.filename, exc)
        raise AssertionError("unreachable")

    def open_local(self, shard: LazyShard) -> Store:
        self._note_reading(shard)
        return open_file(self.fetch(shard))

    def _keep(self) -> set[str]:
        """The shards not to evict: the reader's window, the one before (batches in flight may
        still read it) and those fetched ahead."""
        with self._cond:
            start = max(0, self._position - 1) * SHARD_WINDOW
            return {s.name for s in self._sequence[start:(self._position + 1) * SHARD_WINDOW + self.options.fetch_ahead]}

    # -- fetch-ahead ---------------------------------------------------------------------------
    def follow(self, sequence: list[LazyShard]) -> None:
        """Fetch ``sequence`` (the shards in the order the reader will first read them) ahead of the reader."""
        self._join()
        for shard in self._sequence:
            shard.release()
        with self._cond:
            self._sequence, self._position, self._stop = sequence, 0, False
        if self.options.fetch_ahead > 0 and sequence:
            self._thread = threading.Thread(target=self._run, name="feedline-fetch-ahead", daemon=True)
            self._thread.start()

    def _note_reading(self, shard: LazyShard) -> None:
        """The reader opened ``shard``: the windows two or more before its window are done with
        (the one just before may still be read by batches in flight)."""
        with self._cond:
            if shard not in self._sequence:
                return
            window = self._sequence.index(shard) // SHARD_WINDOW
            if window <= self._position:
                return
            done = self._sequence[max(0, self._position - 1) * SHARD_WINDOW:max(0, window - 1) * SHARD_WINDOW]
            self._position = window
            self._cond.notify_all()
        for old in done:
            old.release()

    def _run(self) -> None:
        for j, shard in enumerate(list(self._sequence)):
            with self._cond:
                while not self._stop and j >= (self._position + 1) * SHARD_WINDOW + self.options.fetch_ahead:
                    self._cond.wait()
                if self._stop:
                    return
            try:
                self.fetch(shard)
            except Exception as exc:   # the reader meets the same error, with its record, when it gets there
                log.debug("fetch-ahead of %s stopped: %s", shard.filename, exc)
                return

    def _join(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def close(self) -> None:
        self._join()


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


def _check_shard(path: str, shard: LazyShard) -> None:
    """The fetched file is this shard: its record count, pack and every record's checksum."""
    try:
        store = open_file(path)
    except StoreError as exc:
        raise ShardDamaged(f"the fetched file does not open ({exc})") from None
    with store:
        if len(store) != len(shard) or store.meta.get("shard") != shard.meta.get("shard"):
            raise ShardDamaged(f"the fetched file holds {len(store)} records of pack "
                               f"{store.meta.get('shard', {}).get('pack_id')}, its head says {len(shard)} of "
                               f"{shard.meta.get('shard', {}).get('pack_id')}")
        sums = shard.checksums
        if sums is None:
            return
        for i in range(len(store)):
            if checksum(store.read(i)) != int(sums[i]):
                raise ShardDamaged(f"record {i} ({shard.columns.path(i)}) fails its checksum")
