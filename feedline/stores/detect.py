"""Open one packed file, recognized by its content (not its name): LMDB or HDF5."""
from __future__ import annotations

from ..core.errors import StoreError
from .base import Store

_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_LMDB_MAGIC = 0xBEEFC0DE


def looks_like_hdf5(head: bytes) -> bool:
    # The superblock sits at 0 or, after a user block, at 512, 1024, 2048, ...
    return any(head.startswith(_HDF5_SIGNATURE, offset) for offset in (0, 512, 1024, 2048))


def looks_like_lmdb(head: bytes) -> bool:
    # LMDB's meta page 0 holds the magic number after the 16-byte page header.
    return len(head) >= 20 and int.from_bytes(head[16:20], "little") == _LMDB_MAGIC


def read_head(path: str) -> bytes:
    """The first 4 KiB of ``path``; StoreError when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4096)
    except FileNotFoundError:
        raise StoreError(f"{path}: no such file or folder") from None
    except OSError as exc:
        raise StoreError(f"{path}: cannot read ({exc.strerror})") from None


def open_file(path: str, head: bytes | None = None) -> Store:
    """The LMDB or HDF5 store at ``path``; StoreError naming the file for anything else."""
    head = read_head(path) if head is None else head
    if looks_like_hdf5(head):
        from .hdf5_store import Hdf5Store
        return Hdf5Store(path)
    if looks_like_lmdb(head):
        from .lmdb_store import LmdbStore
        return LmdbStore(path)
    if not head:
        raise StoreError(f"{path}: empty file; not a feedline store")
    raise StoreError(f"{path}: not a feedline store (neither LMDB nor HDF5). "
                     "Pack an image folder with `feedline pack SRC OUT.lmdb`.")
