"""The remote-file seam: whole objects in a bucket, read into files or bytes, and written.

One small class, ``Bucket``, over obstore (a Rust client: it keeps the GIL free while
bytes move, so fetching ahead does not slow the decoding threads beside it). Which store
serves a scheme is one line of ``_STORES``; GCS, Azure or HTTP would be one more line.
Credentials and endpoint come from the usual environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``...), read by obstore.

Every call is bounded: a timeout per request, a fixed number of tries with backoff, then
one RemoteError line naming the object's URL and what to do. Not-found and access errors
are not retried.
"""
from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta

from ..core.errors import BackendUnavailable, StoreError, UnavailableError
from ..dataset.urls import split_url

log = logging.getLogger(__name__)


class RemoteError(UnavailableError):
    """An object that could not be read or written: missing, refused, or the server did not answer."""


class MissingObjectError(RemoteError):
    """No such object in the bucket."""


class CacheFullError(RemoteError):
    """The cache's disk has no room for a shard."""


class NoAnswerError(RemoteError):
    """Every try of a request failed or went unanswered: the server is down, hung or unreachable."""


DEFAULT_CACHE_LIMIT = 50 << 30


@dataclass(frozen=True)
class RemoteOptions:
    """How remote data sets are fetched and cached. ``cache_dir`` and ``cache_limit`` (bytes)
    left at None are chosen where the data set is opened, by `from_environment`."""

    cache_dir: str | None = None
    cache_limit: int | None = None
    fetch_ahead: int = 2          # shards fetched ahead of the one being read
    tries: int = 4                # per request, before giving up
    backoff_s: float = 0.5        # doubled after each failed try
    timeout_s: float = 60.0       # per request: no answer in this long is a failed try
    endpoint: str | None = None   # overrides AWS_ENDPOINT_URL

    def __post_init__(self):
        if (self.cache_limit is not None and self.cache_limit <= 0) or self.fetch_ahead < 0 or self.tries < 1 \
                or self.timeout_s <= 0:
            raise ValueError(f"RemoteOptions: cache_limit > 0, fetch_ahead >= 0, tries >= 1 and timeout_s > 0, "
                             f"got {self.cache_limit}, {self.fetch_ahead}, {self.tries}, {self.timeout_s}")

    @property
    def fetch_budget_s(self) -> float:
        """The longest one request can take, all its tries and the waits between them included."""
        return self.tries * self.timeout_s + self.backoff_s * (2 ** (self.tries - 1) - 1)

    @property
    def cache_root(self) -> str:
        if self.cache_dir is None:
            raise ValueError("RemoteOptions.cache_dir is not chosen: pass the options through from_environment()")
        return os.path.abspath(self.cache_dir)


def from_environment(options: RemoteOptions | None = None, environ: Mapping[str, str] = os.environ) -> RemoteOptions:
    """``options`` (the defaults when None) with the cache's place and limit, where left at None,
    chosen as users choose them: FEEDLINE_CACHE_DIR (else $XDG_CACHE_HOME/feedline, else
    ~/.cache/feedline) and FEEDLINE_CACHE_LIMIT (bytes, or 50GB, 512MiB; else 50GB). The one
    place that reads them: `open_dataset` (so FeedLoader and the CLI) and `pack` to a bucket
    call it, and pass the result down."""
    options = options or RemoteOptions()
    cache_dir, limit = options.cache_dir, options.cache_limit
    if cache_dir is None:
        cache_dir = environ.get("FEEDLINE_CACHE_DIR") or os.path.join(
            environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "feedline")
    if limit is None:
        text = environ.get("FEEDLINE_CACHE_LIMIT")
        limit = parse_bytes(text, "FEEDLINE_CACHE_LIMIT") if text else DEFAULT_CACHE_LIMIT
    return replace(options, cache_dir=cache_dir, cache_limit=limit)


_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_bytes(text: str, what: str) -> int:
    """'50GB', '512MiB' or '1000000' -> bytes; a StoreError naming ``what`` otherwise."""
    import re
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*", text, re.IGNORECASE)
    if not match or float(match[1]) <= 0:
        raise StoreError(f"{what}={text!r}: give a size such as 50GB, 512MiB or a number of bytes")
    return int(float(match[1]) * _UNITS[(match[2] or "").upper()])


def _s3(bucket: str, options: RemoteOptions):
    from obstore.store import S3Store
    endpoint = options.endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    config = {"endpoint": endpoint} if endpoint else {}
    if not (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")):
        config["region"] = "us-east-1"
    client = {"timeout": f"{options.timeout_s}s", "connect_timeout": f"{min(options.timeout_s, 10.0)}s",
              "allow_http": bool(endpoint and endpoint.startswith("http://"))}
    # Retries are ours (below), so that a dead server costs a known, bounded time.
    retry = {"max_retries": 0, "backoff": {"init_backoff": timedelta(seconds=0.1), "max_backoff": timedelta(seconds=1),
                                           "base": 2.0}, "retry_timeout": timedelta(seconds=options.timeout_s)}
    return S3Store(bucket, config=config, client_options=client, retry_config=retry)


_STORES = {"s3": _s3}   # scheme -> store factory; a new scheme is one line here (and in urls.SCHEMES)


class Bucket:
    """Objects under one ``scheme://bucket``; keys are relative to the bucket."""

    def __init__(self, scheme: str, name: str, options: RemoteOptions):
        try:
            import obstore
        except ImportError:
            raise BackendUnavailable(f"reading {scheme}:// needs obstore: pip install 'feedline[s3]' (or obstore)") from None
        self._obstore = obstore
        self.scheme, self.name, self.options = scheme, name, options
        self._store = _STORES[scheme](name, options)
        self._pid = os.getpid()   # obstore's runtime lives in this process only

    @classmethod
    def of(cls, url: str, options: RemoteOptions) -> tuple["Bucket", str]:
        """The bucket of ``url`` and the key ``url`` names in it."""
        scheme, name, key = split_url(url)
        return cls(scheme, name, options), key

    def url(self, key: str) -> str:
        return f"{self.scheme}://{self.name}/{key}"

    def read(self, key: str) -> bytes:
        """The whole object ``key``."""
        return self._call("read", key, lambda: bytes(self._obstore.get(self._store, key).bytes()))

    def size(self, key: str) -> int | None:
        """The object's size in bytes, or None when there is no such object."""
        try:
            return int(self._call("look up", key, lambda: self._obstore.head(self._store, key))["size"])
        except MissingObjectError:
            return None

    def download(self, key: str, dest: str) -> int:
        """Object ``key`` into the file ``dest`` (created, or written over and cut to the object's
        size: a file made to reserve the room keeps its size while it fills); its size in bytes."""
        def fetch() -> int:
            result = self._obstore.get(self._store, key)
            written = 0
            with open(os.open(dest, os.O_WRONLY | os.O_CREAT, 0o644), "wb") as fh:
                for chunk in result.stream(min_chunk_size=8 << 20):
                    fh.write(chunk)
                    written += len(chunk)
                fh.truncate(written)
            return written
        return self._call("fetch", key, fetch)

    def upload(self, path: str, key: str) -> None:
        """The local file ``path`` as object ``key`` (visible whole, or not at all)."""
        def put() -> None:
            with open(path, "rb") as fh:
                self._obstore.put(self._store, key, fh, chunk_size=8 << 20)
        self._call("upload", key, put)

    def write(self, key: str, data: bytes) -> None:
        self._call("write", key, lambda: self._obstore.put(self._store, key, data))

    def _call(self, what: str, key: str, fn):
        """``fn()``, tried again after a transient failure; RemoteError after the last try."""
        exceptions = self._obstore.exceptions
        url = self.url(key)
        if os.getpid() != self._pid:   # a forked child: the client's runtime threads are not here, it would hang
            raise RemoteError(f"{url}: cannot {what} it in a process forked from the one that opened the bucket "
                              "(obstore's client does not survive a fork); open the data set in this process")
        delay, last = self.options.backoff_s, None
        for attempt in range(1, self.options.tries + 1):
            try:
                return fn()
            except (FileNotFoundError, exceptions.NotFoundError) as exc:
                if "NoSuchBucket" in str(exc):
                    raise RemoteError(f"{url}: no bucket {self.name!r} at this endpoint; check the URL, "
                                      "AWS_ENDPOINT_URL, or create the bucket") from None
                raise MissingObjectError(f"{url}: no such object; check the URL (or upload it with "
                                  "`feedline pack SRC URL`)") from None
            except (exceptions.PermissionDeniedError, exceptions.UnauthenticatedError):
                raise RemoteError(f"{url}: access denied; check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                                  "(or the profile) and that they may read this bucket") from None
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise CacheFullError(f"{url}: the disk is full writing it locally; free space, lower "
                                         "cache_limit, or set FEEDLINE_CACHE_DIR to a bigger disk") from None
                last = exc
            except exceptions.BaseError as exc:
                last = exc
            if attempt < self.options.tries:
                log.warning("%s: %s failed (try %d of %d: %s); again in %.1f s", url, what, attempt,
                            self.options.tries, _first_line(last), delay)
                time.sleep(delay)
                delay *= 2
        raise NoAnswerError(f"{url}: {what} failed {self.options.tries} times ({_first_line(last)}); check that "
                          "the server at AWS_ENDPOINT_URL (or the bucket's region) answers, then run again")


def _first_line(exc) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
