"""Stores: random access to packed data sets (LMDB, HDF5) and plain image folders."""
from __future__ import annotations

import os

from ..errors import StoreError
from .base import Store

_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_LMDB_MAGIC = 0xBEEFC0DE


def _looks_like_hdf5(head: bytes) -> bool:
    # The superblock sits at 0 or, after a user block, at 512, 1024, 2048, ...
    return any(head.startswith(_HDF5_SIGNATURE, offset) for offset in (0, 512, 1024, 2048))


def _looks_like_lmdb(head: bytes) -> bool:
    # LMDB's meta page 0 holds the magic number after the 16-byte page header.
    return len(head) >= 20 and int.from_bytes(head[16:20], "little") == _LMDB_MAGIC


def open_dataset(path: str | os.PathLike, labels_csv: str | None = None) -> Store:
    """Open an LMDB file, an HDF5 file or an image folder, recognized by content."""
    path = os.fspath(path)
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "data.mdb")):
            raise StoreError(f"{path}: an LMDB directory; feedline stores are single-file LMDB. "
                             "Pack the image folder with `feedline pack SRC OUT.lmdb`.")
        from .folder_store import FolderStore
        return FolderStore(path, labels_csv)
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except FileNotFoundError:
        raise StoreError(f"{path}: no such file or folder") from None
    except OSError as exc:
        raise StoreError(f"{path}: cannot read ({exc.strerror})") from None
    if _looks_like_hdf5(head):
        from .hdf5_store import Hdf5Store
        return Hdf5Store(path)
    if _looks_like_lmdb(head):
        from .lmdb_store import LmdbStore
        return LmdbStore(path)
    if not head:
        raise StoreError(f"{path}: empty file; not a feedline store")
    raise StoreError(f"{path}: not a feedline store (neither LMDB nor HDF5). "
                     "Pack an image folder with `feedline pack SRC OUT.lmdb`.")


__all__ = ["Store", "open_dataset"]
