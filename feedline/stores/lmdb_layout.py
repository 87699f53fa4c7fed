"""Where an LMDB file keeps each record's bytes, read from its B-tree pages alone.

Read-ahead hints need the file offset of every record of a run. Asking LMDB (a lookup
per record) touches each value's first page, so on a cold store every lookup is a
synchronous disk read: placing the records would cost what reading them costs. The
B-tree's leaf pages already say where each value lies (the page number of a large
value's overflow pages, or the place of a small one within the leaf), and they are a
small part of the file (about 30 bytes per record), so they are read here, once, level
by level, each level's pages advised together. Not so for records under about half a
page, which LMDB keeps inside the leaf pages: those stores get no hints (HDF5 keeps an
offset table and suits small records bigger than RAM).

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

import numpy as np

from ..dataset.format import LMDB_IMAGE_PREFIX

PAGE_HEADER = 16
P_BRANCH, P_LEAF = 0x01, 0x02
F_BIGDATA = 0x01
_META_ROOT = PAGE_HEADER + 72 + 40     # mm_dbs[MAIN_DBI].md_root
_META_TXNID = PAGE_HEADER + 128        # mm_txnid
_KEY_DIGITS = 10                       # image_key: prefix + 10 digits


class LayoutError(ValueError):
    """The pages do not read as this module expects: no hints, reads are unaffected."""


MAX_INDEX_SHARE = 0.05   # leaf pages beyond this share of the file hold the records themselves
SMALL_INDEX = 1 << 20    # ... unless they are few: then reading them costs nothing either way


def value_places(path: str, psize: int, count: int, leaf_pages: int) -> tuple[np.ndarray, np.ndarray]:
    """The file offset (int64) and length (int32) of the value of every record
    ``0 .. count - 1`` of the LMDB file ``path`` with page size ``psize`` and ``leaf_pages``
    leaf pages. LayoutError when records are kept inside the leaf pages (values under about
    half a page): there, finding them would mean reading them."""
    if leaf_pages * psize > max(MAX_INDEX_SHARE * os.path.getsize(path), SMALL_INDEX):
        raise LayoutError(f"the records lie inside the B-tree's {leaf_pages} leaf pages (records of under "
                          f"{psize // 2} bytes): placing them would mean reading them")
    fd = os.open(path, os.O_RDONLY)
    try:
        pages = _page_reader(fd, psize)
        level = [_root(pages)]
        while True:
            found = pages(level)
            flags = found[:, 10:12].copy().view("<u2")[:, 0]
            if bool(np.all(flags & P_LEAF)):
                return _read_leaves(found, np.array(level, dtype=np.int64), psize, count)
            if not bool(np.all(flags & P_BRANCH)):
                raise LayoutError("a level of the B-tree mixes branch and leaf pages")
            page_of, at = _nodes(found)
            head = _gather(found, page_of, at, 6).view("<u2")        # lo, hi, flags: the child's pgno
            level = (head[:, 0].astype(np.int64) | head[:, 1].astype(np.int64) << 16
                     | head[:, 2].astype(np.int64) << 32).tolist()
    finally:
        os.close(fd)


def key_places(path: str, psize: int, keys: list[bytes]) -> dict[bytes, tuple[int, int]]:
    """(file offset, length) of the values of ``keys`` (those present), found by descending
    the B-tree: a few pages per key, whatever the size of the file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        pages = _page_reader(fd, psize)
        places = {}
        for key in keys:
            pgno = _root(pages)
            for _ in range(64):   # a B-tree of 64 levels would hold more than any file
                page = pages([pgno])
                nodes = [(at, *_node(page[0], at)) for at in _nodes(page)[1].tolist()]
                if page[0, 10] & P_LEAF:
                    places.update({key: _place(at, head, pgno, psize, page[0]) for at, head, k in nodes if k == key})
                    break
                below = [head for at, head, k in nodes if k <= key] or [nodes[0][1]]   # node 0's key is empty
                pgno = below[-1][0] | below[-1][1] << 16 | below[-1][2] << 32
        return places
    finally:
        os.close(fd)


def _page_reader(fd: int, psize: int):
    def pages(numbers: list[int]) -> np.ndarray:
        """The pages ``numbers`` as a (pages, psize) array, read in parallel, not one by one."""
        if hasattr(os, "posix_fadvise"):
            for pgno in numbers:
                os.posix_fadvise(fd, pgno * psize, psize, os.POSIX_FADV_WILLNEED)
        data = [os.pread(fd, psize, pgno * psize) for pgno in numbers]
        if any(len(d) != psize for d in data):
            raise LayoutError("a page lies past the end of the file")
        return np.frombuffer(b"".join(data), dtype=np.uint8).reshape(len(numbers), psize)
    return pages


def _root(pages) -> int:
    """The main database's root page, from the newer meta page."""
    metas = pages([0, 1])
    meta = metas[int(np.argmax(metas[:, _META_TXNID:_META_TXNID + 8].copy().view("<u8")[:, 0]))]
    return int(meta[_META_ROOT:_META_ROOT + 8].copy().view("<u8")[0])


def _node(page: np.ndarray, at: int) -> tuple[tuple[int, int, int, int], bytes]:
    head = tuple(int(x) for x in page[at:at + 8].copy().view("<u2"))
    return head, page[at + 8:at + 8 + head[3]].tobytes()


def _place(at: int, head: tuple, pgno: int, psize: int, page: np.ndarray) -> tuple[int, int]:
    data = at + 8 + head[3]
    if head[2] & F_BIGDATA:
        return int(page[data:data + 8].copy().view("<u8")[0]) * psize + PAGE_HEADER, head[0] | head[1] << 16
    return pgno * psize + data, head[0] | head[1] << 16


def _nodes(found: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(page, offset in the page) of every node of the pages ``found``."""
    lower = found[:, 12:14].copy().view("<u2")[:, 0].astype(np.int64)
    counts = (lower - PAGE_HEADER) // 2
    if bool(np.any(counts < 0)):
        raise LayoutError("a page header is damaged")
    pointers = found[:, PAGE_HEADER:PAGE_HEADER + 2 * int(counts.max(initial=0))].copy().view("<u2")
    page_of, slot = np.nonzero(np.arange(pointers.shape[1]) < counts[:, None])
    return page_of, pointers[page_of, slot].astype(np.int64)


def _gather(found: np.ndarray, page_of: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """``width`` bytes at ``at`` in page ``page_of``, for every node: (nodes, width) uint8."""
    psize = found.shape[1]
    if len(at) and int(at.max()) + width > psize:
        raise LayoutError("a node runs past the end of its page")
    return found.reshape(-1)[(page_of * psize + at)[:, None] + np.arange(width)]


def _read_leaves(found: np.ndarray, numbers: np.ndarray, psize: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    page_of, at = _nodes(found)
    head = _gather(found, page_of, at, 8).view("<u2")             # lo, hi, flags, ksize
    key_length = len(LMDB_IMAGE_PREFIX) + _KEY_DIGITS
    mine = head[:, 3] == key_length                                 # not metadata or columns
    page_of, at, head = page_of[mine], at[mine], head[mine]
    keys = _gather(found, page_of, at + 8, key_length)
    digits = keys[:, len(LMDB_IMAGE_PREFIX):].astype(np.int64) - ord("0")
    prefix = np.frombuffer(LMDB_IMAGE_PREFIX, dtype=np.uint8)
    index = digits @ (10 ** np.arange(_KEY_DIGITS - 1, -1, -1, dtype=np.int64))
    mine = (np.all(keys[:, :len(prefix)] == prefix, axis=1) & np.all((digits >= 0) & (digits <= 9), axis=1)
            & (index < count))   # beyond the count: `feedline verify` reports those
    page_of, at, head, index = page_of[mine], at[mine], head[mine], index[mine]
    data_at = at + 8 + key_length
    overflow = _gather(found, page_of, np.minimum(data_at, psize - 8), 8).copy().view("<u8")[:, 0].astype(np.int64)
    offsets = np.full(count, -1, dtype=np.int64)
    lengths = np.zeros(count, dtype=np.int32)
    offsets[index] = np.where((head[:, 2] & F_BIGDATA) != 0, overflow * psize + PAGE_HEADER,
                              numbers[page_of] * psize + data_at)   # a large value's pages, or in the leaf
    lengths[index] = head[:, 0].astype(np.int64) | head[:, 1].astype(np.int64) << 16
    if bool(np.any(offsets < 0)):
        raise LayoutError(f"{int(np.sum(offsets < 0))} records have no leaf node")
    return offsets, lengths
