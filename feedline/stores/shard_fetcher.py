"""Fetching a remote data set's shards into the local cache: each checked against its head
(record count, pack, every record's checksum) and fetched once more when it does not
check out; and one fetch-ahead thread that follows the visit order the reader announced,
a window or so in front of it, while the cache spares the shards in use."""
from __future__ import annotations

import logging
import os
import posixpath
import threading
import weakref

from ..errors import StoreError
from ..format import checksum
from ..order import SHARD_WINDOW
from .base import Store
from .detect import open_file
from .fetch_service import FetchService
from .remote import Bucket, RemoteError, RemoteOptions
from .shard_cache import ShardCache, ShardDamaged

log = logging.getLogger(__name__)
_fetchers: "weakref.WeakSet[ShardFetcher]" = weakref.WeakSet()


def _serve_before_fork() -> None:
    for fetcher in list(_fetchers):
        fetcher.serve_children()


os.register_at_fork(before=_serve_before_fork)

Shard = Store   # a remote_store.LazyShard: its name, URL, size and head (meta, columns)


class ShardFetcher:
    """Fetches shards into the cache (checked), opens them, and runs the fetch-ahead thread."""

    def __init__(self, bucket: Bucket, prefix: str, cache: ShardCache, options: RemoteOptions):
        self.bucket, self.prefix, self.cache, self.options = bucket, prefix, cache, options
        self._cond = threading.Condition()
        self._sequence: list[Shard] = []
        self._position = 0            # the window of the sequence the reader is in
        self._thread: threading.Thread | None = None
        self._stop = False
        self._shards: dict[str, Shard] = {}   # by name: what a forked child's request names
        self._owner, self._closed = os.getpid(), False
        self.service: FetchService | None = None   # started before the first fork
        _fetchers.add(self)

    def serve_children(self) -> None:
        """Before a fork: the service the child will ask for shards (started once, here only)."""
        if self.service is None and not self._closed and os.getpid() == self._owner:
            self.service = FetchService(weakref.WeakMethod(self._open_for_child))
            weakref.finalize(self, self.service.close)

    def adopt(self, shard: Shard) -> None:
        """``shard`` is fetched by this fetcher (a forked child asks for it by name)."""
        self._shards[shard.name] = shard

    def key(self, name: str) -> str:
        return posixpath.join(self.prefix, name) if self.prefix else name

    # -- fetching ------------------------------------------------------------------------------
    def fetch(self, shard: Shard) -> str:
        """The cached path of ``shard``, fetched and checked when not there; fetched once more
        when the first copy does not check out."""
        try:
            return self._get(shard)
        except ShardDamaged as exc:
            log.warning("%s: %s; fetching it again", shard.filename, exc)
        try:
            return self._get(shard)
        except ShardDamaged as exc:
            raise RemoteError(f"{shard.filename}: {exc}, again after fetching it a second time: the object in the "
                              "bucket is damaged or was replaced. Pack and upload it again "
                              "(`feedline pack SRC URL --resume`)") from None

    def _get(self, shard: Shard) -> str:
        return self.cache.get(shard.name, shard.size_bytes, lambda dest: self.bucket.download(self.key(shard.name), dest),
                              lambda path: _check_shard(path, shard), keep=self._keep())

    def open_local(self, shard: Shard) -> Store:
        if os.getpid() != self._owner and self.service is not None:   # forked: obstore's client does not survive it
            path, needed = self.service.open(shard.name)
            for other in self._shards.values():
                if other is not shard and other.name not in needed:
                    other.release()   # as the opener releases its own: the windows behind the reader
            return open_file(path)
        self._note_reading(shard)
        return open_file(self.fetch(shard))

    def _open_for_child(self, name: str) -> tuple[str, list[str]]:
        """A forked child opens shard ``name``: fetched here, and the reader's place moved."""
        shard = self._shards[name]
        self._note_reading(shard)
        return self.fetch(shard), sorted(self._keep())

    def _keep(self) -> set[str]:
        """The shards not to evict: the reader's window, the one before (batches in flight may
        still read it) and those fetched ahead."""
        with self._cond:
            start = max(0, self._position - 1) * SHARD_WINDOW
            return {s.name for s in self._sequence[start:(self._position + 1) * SHARD_WINDOW + self.options.fetch_ahead]}

    # -- fetch-ahead ---------------------------------------------------------------------------
    def follow(self, sequence: list[Shard]) -> None:
        """Fetch ``sequence`` (the shards in the order the reader will first read them) ahead of the reader."""
        self._join()
        for shard in self._sequence:
            shard.release()
        with self._cond:
            self._sequence, self._position, self._stop = sequence, 0, False
        if self.options.fetch_ahead > 0 and sequence:
            self._thread = threading.Thread(target=self._run, name="feedline-fetch-ahead", daemon=True)
            self._thread.start()

    def _note_reading(self, shard: Shard) -> None:
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
        self._closed = True
        self._join()
        if self.service is not None:
            self.service.close()


def _check_shard(path: str, shard: Shard) -> None:
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
