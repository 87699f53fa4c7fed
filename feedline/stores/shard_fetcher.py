"""Fetching a remote data set's shards into the local cache: each checked against its head
(record count, pack, every record's checksum) and fetched once more when it does not
check out; and one fetch-ahead thread that follows the visit order the reader announced,
a window or so in front of it, while the cache spares the shards in use.

A server that does not answer costs one request's budget (tries x timeout), not one per
waiting reader: a fetch that fails so is the answer of every fetch that waited for it, and
of every fetch begun within a request's timeout after it."""
from __future__ import annotations

import logging
import os
import posixpath
import threading
import time
import weakref

from ..core.errors import StoreError
from ..dataset.format import checksum
from ..planning.order import SHARD_WINDOW
from .base import Store
from .detect import open_file
from .fetch_service import FetchService
from .remote import Bucket, NoAnswerError, RemoteError, RemoteOptions
from .shard_cache import ShardCache, ShardDamaged

log = logging.getLogger(__name__)
JOIN_S = 2.0   # closing waits this long for a fetch in flight, then leaves it to its request's timeout

Shard = Store   # a remote_store.LazyShard: its name, URL, size and head (meta, columns)


class ShardFetcher:
    """Fetches shards into the cache (checked), opens them, and runs the fetch-ahead thread."""

    def __init__(self, bucket: Bucket, prefix: str, cache: ShardCache, options: RemoteOptions):
        self.bucket, self.prefix, self.cache, self.options = bucket, prefix, cache, options
        self._cond = threading.Condition()
        self._sequence: list[Shard] = []
        self._position = 0            # the window of the sequence the reader is in
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()   # the running thread's own: a new one gets a new one
        self._shards: dict[str, Shard] = {}   # by name: what a forked child's request names
        self._owner, self._closed = os.getpid(), False
        self._no_answer: tuple[float, NoAnswerError] | None = None   # (when, error) of the last unanswered fetch
        self.service: FetchService | None = None   # started before the first fork

    def serve_children(self) -> None:
        """Before forking readers: start the service they will ask for shards (once, in the opener only)."""
        if self.service is None and not self._closed and os.getpid() == self._owner:
            self.service = FetchService(weakref.WeakMethod(self._open_for_child))
            weakref.finalize(self, self.service.close)

    def adopt(self, shard: Shard) -> None:
        """``shard`` is fetched by this fetcher (a forked child asks for it by name)."""
        self._shards[shard.name] = shard

    def key(self, name: str) -> str:
        return posixpath.join(self.prefix, name) if self.prefix else name

    # -- fetching ------------------------------------------------------------------------------
    def fetch(self, shard: Shard, ahead: threading.Event | None = None) -> str:
        """The cached path of ``shard``, fetched and checked when not there (twice if need be).
        ``ahead``: the fetch-ahead's stop; NotWanted when stopped or the reader moved past it."""
        try:
            return self._get(shard, ahead)
        except ShardDamaged as exc:
            log.warning("%s: %s; fetching it again", shard.filename, exc)
        try:
            return self._get(shard, ahead)
        except ShardDamaged as exc:
            raise RemoteError(f"{shard.filename}: {exc}, again after fetching it a second time: the object in the "
                              "bucket is damaged or was replaced. Pack and upload it again "
                              "(`feedline pack SRC URL --resume`)") from None

    def _get(self, shard: Shard, ahead: threading.Event | None) -> str:
        started = time.monotonic()
        try:
            return self.cache.get(shard.name, shard.size_bytes,
                                  lambda dest: self.bucket.download(self.key(shard.name), dest),
                                  lambda path: _check_shard(path, shard), keep=self._keep(),
                                  before_fetch=lambda: self._before_fetch(shard, started, ahead))
        except NoAnswerError as exc:
            self._no_answer = (time.monotonic(), exc)
            raise

    def _before_fetch(self, shard: Shard, started: float, ahead: threading.Event | None) -> None:
        """The shard's lock held and the shard not there: raise the server's last failure if it came
        while this waited, or less than a request's timeout before (another try would wait as long)."""
        failed = self._no_answer
        if failed is not None and failed[0] > started - self.options.timeout_s:
            raise NoAnswerError(str(failed[1]))
        if ahead is not None and (ahead.is_set() or shard.name not in self._keep()):
            raise NotWanted(shard.name)

    def open_local(self, shard: Shard) -> Store:
        if os.getpid() != self._owner:   # forked: obstore's client does not survive it, the opener fetches
            if self.service is None:
                raise RemoteError(f"{shard.filename}: read in a process forked from the one that opened the data set "
                                  "without store.before_fork() called there first: call it in the parent just "
                                  "before forking processes that will read this store")
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
        """The shards not to evict: the reader's window, the one before (still read) and those ahead."""
        with self._cond:
            start = max(0, self._position - 1) * SHARD_WINDOW
            return {s.name for s in self._sequence[start:(self._position + 1) * SHARD_WINDOW + self.options.fetch_ahead]}

    # -- fetch-ahead ---------------------------------------------------------------------------
    def follow(self, sequence: list[Shard]) -> None:
        """Fetch ``sequence`` (the shards in the order the reader will first read them) ahead of the reader."""
        self._join(JOIN_S)
        for shard in self._sequence:
            shard.release()
        with self._cond:
            self._sequence, self._position, self._stop = sequence, 0, threading.Event()
        if self.options.fetch_ahead > 0 and sequence:
            self._thread = threading.Thread(target=self._run, args=(list(sequence), self._stop),
                                            name="feedline-fetch-ahead", daemon=True)
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

    def _run(self, sequence: list[Shard], stop: threading.Event) -> None:
        for j, shard in enumerate(sequence):
            with self._cond:
                while not stop.is_set() and j >= (self._position + 1) * SHARD_WINDOW + self.options.fetch_ahead:
                    self._cond.wait()
                if stop.is_set():
                    return
            try:
                self.fetch(shard, ahead=stop)
            except NotWanted:   # stopped, or the reader went past it while this waited for its lock
                continue
            except Exception as exc:   # the reader meets the same error, with its record, when it gets there
                log.debug("fetch-ahead of %s stopped: %s", shard.filename, exc)
                return

    def _join(self, timeout: float) -> None:
        with self._cond:
            self._stop.set()
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():   # inside a request: it ends with that request's timeout, a daemon
                log.debug("fetch-ahead still inside a request after %.0f s: left to end on its own", timeout)
            self._thread = None

    def close(self) -> None:
        """Stop the fetch-ahead thread and the service (in the opener; a child leaves them alone)."""
        if os.getpid() != self._owner:
            return
        self._closed = True
        self._join(JOIN_S)
        if self.service is not None:
            self.service.close()


class NotWanted(Exception):
    """A shard the fetch-ahead thread no longer needs to fetch."""


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
