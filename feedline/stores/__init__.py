"""Stores: random access to packed data sets (LMDB, HDF5, shards of either) and plain image folders."""
from __future__ import annotations

import os
from collections.abc import Sequence

from ..core.errors import StoreError
from ..dataset.format import SHARD_INDEX_SUFFIX, shard_index
from .base import Store
from .detect import open_file, read_head
from .remote import RemoteOptions, from_environment
from .sharded_store import ShardedStore
from ..dataset.urls import check_url, url_scheme

_GLOB_CHARS = "*?["


def open_dataset(source: str | os.PathLike | Sequence[str | os.PathLike], labels_csv: str | None = None,
                 remote: RemoteOptions | None = None) -> Store:
    """Open a data set: an LMDB or HDF5 file (recognized by content), an image folder,
    a shard index (OUT.shards.json, or s3://bucket/OUT.shards.json: fetched through a local
    cache as ``remote`` says), a glob matching shard files, or a list of them.
    Several files are one data set with one record numbering, checked at open: a
    missing or repeated shard, or shards of different packs, classes or versions, fail here."""
    if not isinstance(source, (str, os.PathLike)):
        paths = [os.fspath(p) for p in source]
        for path in paths:
            if url_scheme(path):
                check_url(path)
                raise StoreError(f"{path}: a remote data set is opened by its shard index URL "
                                 "(s3://bucket/OUT.shards.json), not by a list of shards")
        return ShardedStore.from_paths(paths)
    path = os.fspath(source)
    if url_scheme(path):
        check_url(path)
        from .remote_store import open_remote
        return open_remote(path, from_environment(remote))
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "data.mdb")):
            raise StoreError(f"{path}: an LMDB directory; feedline stores are single-file LMDB. "
                             "Pack the image folder with `feedline pack SRC OUT.lmdb`.")
        from .folder_store import FolderStore
        return FolderStore(path, labels_csv)
    if not os.path.exists(path):
        if any(c in path for c in _GLOB_CHARS):
            return ShardedStore.from_glob(path)
        if os.path.exists(shard_index(path)) and not path.endswith(SHARD_INDEX_SUFFIX):
            raise StoreError(f"{path}: no such file, but {shard_index(path)} names the shards of a sharded "
                             "pack: open that")
    head = read_head(path)
    if head.lstrip()[:1] == b"{":
        return ShardedStore.from_index(path)
    return open_file(path, head)


def shard_counts(store: Store) -> tuple[int, ...]:
    """The record count of each shard, in record order: one shard for a single file."""
    return store.shard_counts() if isinstance(store, ShardedStore) else (len(store),)


def will_visit(store: Store, indices) -> None:
    """A hint: the records read next, in order; a remote store fetches their shards ahead
    (and stops fetching when there are none). Nothing for other stores."""
    if is_remote(store):
        store.will_visit(indices)


def is_remote(store: Store) -> bool:
    """Whether ``store`` reads shards from a bucket (through the local cache)."""
    from .remote_store import RemoteShardedStore
    return isinstance(store, RemoteShardedStore)


__all__ = ["Store", "ShardedStore", "RemoteOptions", "from_environment", "open_dataset", "is_remote", "shard_counts",
           "will_visit"]
