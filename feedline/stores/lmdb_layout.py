"""Where an LMDB file keeps each record's bytes, read from its B-tree pages alone.

Read-ahead hints need the file offset of every record of a run. Asking LMDB (a lookup
per record) touches each value's first page, so on a cold store every lookup is a
synchronous disk read: placing the records would cost what reading them costs. The
B-tree's leaf pages already say where each value lies (the page number of a large
value's overflow pages, or the place of a small one within the leaf), and they are a
small part of the file (about 30 bytes per record), so they are read here, once, with
read-ahead of their own.

LMDB's data format (lmdb.h, mdb.c; unchanged since 0.9, little-endian, 64-bit ``pgno_t``):
a page starts with a 16-byte header (pgno u64, pad u16, flags u16, lower u16, upper
u16); two meta pages at page 0 and 1, the newer (higher txnid) current, each holding
the main database's root page; branch and leaf pages list their nodes' offsets after
the header; a node is (lo u16, hi u16, flags u16, ksize u16, key, data): in a branch,
lo | hi << 16 | flags << 32 is the child page; in a leaf, lo | hi << 16 is the data's
size, and with F_BIGDATA the data is the number of the overflow page whose content
starts after its header.
"""
from __future__ import annotations

import os
import struct

import numpy as np

from ..format import LMDB_IMAGE_PREFIX

PAGE_HEADER = 16
P_BRANCH, P_LEAF = 0x01, 0x02
F_BIGDATA = 0x01
_META_ROOT = PAGE_HEADER + 72 + 40     # mm_dbs[MAIN_DBI].md_root
_META_TXNID = PAGE_HEADER + 128        # mm_txnid
_KEY_DIGITS = 10                       # image_key: prefix + 10 digits


class LayoutError(ValueError):
    """The pages do not read as this module expects: no hints, reads are unaffected."""


def value_places(path: str, psize: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The file offset (int64) and length (int32) of the value of every record
    ``0 .. count - 1`` of the LMDB file ``path`` with page size ``psize``."""
    fd = os.open(path, os.O_RDONLY)
    try:
        def page(pgno: int) -> bytes:
            data = os.pread(fd, psize, pgno * psize)
            if len(data) != psize:
                raise LayoutError(f"page {pgno} lies past the end of the file")
            return data

        metas = [page(0), page(1)]
        meta = max(metas, key=lambda m: struct.unpack_from("<Q", m, _META_TXNID)[0])
        level = [struct.unpack_from("<Q", meta, _META_ROOT)[0]]
        offsets = np.full(count, -1, dtype=np.int64)
        lengths = np.zeros(count, dtype=np.int32)
        while level:
            if hasattr(os, "posix_fadvise"):  # each level's pages in parallel, not one by one
                for pgno in level:
                    os.posix_fadvise(fd, pgno * psize, psize, os.POSIX_FADV_WILLNEED)
            below = []
            for pgno in level:
                data = page(pgno)
                flags, lower = struct.unpack_from("<HH", data, 10)
                nodes = struct.unpack_from(f"<{(lower - PAGE_HEADER) // 2}H", data, PAGE_HEADER)
                if flags & P_BRANCH:
                    below += [_child(data, at) for at in nodes]
                elif flags & P_LEAF:
                    _read_leaf(data, pgno * psize, psize, nodes, offsets, lengths)
                else:
                    raise LayoutError(f"page {pgno} is neither a branch nor a leaf (flags {flags:#x})")
            level = below
    finally:
        os.close(fd)
    if bool(np.any(offsets < 0)):
        raise LayoutError(f"{int(np.sum(offsets < 0))} records have no leaf node")
    return offsets, lengths


def _child(data: bytes, at: int) -> int:
    lo, hi, flags = struct.unpack_from("<HHH", data, at)
    return lo | hi << 16 | flags << 32


def _read_leaf(data: bytes, start: int, psize: int, nodes, offsets: np.ndarray, lengths: np.ndarray) -> None:
    prefix = LMDB_IMAGE_PREFIX
    for at in nodes:
        lo, hi, flags, ksize = struct.unpack_from("<HHHH", data, at)
        key = data[at + 8:at + 8 + ksize]
        if ksize != len(prefix) + _KEY_DIGITS or not key.startswith(prefix):
            continue  # metadata, columns
        index = int(key[len(prefix):])
        if index >= len(offsets):
            continue  # beyond the count: `feedline verify` reports those
        value = at + 8 + ksize
        if flags & F_BIGDATA:
            offsets[index] = struct.unpack_from("<Q", data, value)[0] * psize + PAGE_HEADER
        else:
            offsets[index] = start + value
        lengths[index] = lo | hi << 16
