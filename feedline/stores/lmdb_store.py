"""LMDB store: one file, one key per record, columns and metadata under feedline/."""
from __future__ import annotations

import logging
from functools import partial

import lmdb
import numpy as np

from ..core.errors import StoreError
from ..fields import per_pixel
from ..dataset.format import (LMDB_COLUMN_PREFIX, LMDB_IMAGE_PREFIX, LMDB_JOURNAL_PREFIX, LMDB_META_KEY, MASK_SUFFIX,
                      image_key, parse_meta)
from .advice import merged_ranges, will_need
from .base import Store, column_names, load_columns, load_targets
from .lmdb_environment import Reader
from .lmdb_layout import LayoutError, key_places, value_places
from .process_local import ProcessLocal

log = logging.getLogger(__name__)


class LmdbStore(Store):
    """Reads are zero-copy: each thread keeps one read-only transaction open and
    ``read`` returns a memoryview into the memory map, valid until ``close()``. A forked
    child begins its own transactions at its first read and never closes what it inherited."""

    kind = "lmdb"

    def __init__(self, filename: str):
        self.filename = filename
        self._reader: ProcessLocal[Reader] = ProcessLocal(partial(Reader, filename), Reader.close)
        env = self._environment()
        try:
            with env.begin(buffers=True) as txn:
                raw_meta = txn.get(LMDB_META_KEY)
                if raw_meta is None:
                    raise StoreError(f"{filename}: an LMDB file, but not a feedline store (no feedline/meta key)"
                                     + self._partial_hint())
                self.meta = parse_meta(bytes(raw_meta), filename)
                buffers = _read_columns(txn, column_names(self.meta), filename, env.stat()["psize"])
            self.classes = list(self.meta["classes"])
            self.columns = load_columns(buffers, self.meta["count"], filename)
            self._targets = load_targets(self.meta, buffers, self.meta["count"], filename)
            self._note_missing_checksums()
        except lmdb.Error as exc:
            self.close()
            raise StoreError(f"{filename}: the LMDB file is damaged ({exc}). Pack it again.") from None
        except StoreError:
            self.close()
            raise

    def _partial_hint(self) -> str:
        return "" if not self.filename.endswith(".partial") else \
            " (an unfinished pack: rerun `feedline pack ... --resume`)"

    def _environment(self) -> lmdb.Environment:
        return self._reader.get().share.env

    def read(self, index: int):
        i = self._check(index)
        return self._value(image_key(i), i, "")

    def read_mask(self, index: int):
        if not per_pixel(self.fields):
            return super().read_mask(index)
        i = self._check(index)
        return self._value(image_key(i) + MASK_SUFFIX, i, ": its mask")

    def _value(self, key: bytes, i: int, what: str):
        try:
            value = self._reader.get().txn().get(key)
        except lmdb.Error as exc:
            self._reader.get().drop_txn()   # LMDB invalidates a transaction that met damage
            raise StoreError(f"{self.filename}: record {i} ({self.path(i)}){what} cannot be read ({exc}); "
                             "the file is damaged. Pack it again.") from None
        if value is None:
            raise StoreError(f"{self.filename}: record {i} ({self.path(i)}){what} is missing; "
                             "the file is damaged. Pack it again.")
        return value

    def byte_ranges(self, first: int, stop: int) -> list[tuple[str, int, int]]:
        self._check_span(first, stop)
        share = self._reader.get().share
        if share.places is None:  # two threads may both find them: either result serves
            share.places = _find_places(self)
        if share.places is False or first == stop:
            return []
        offsets, lengths = share.places
        return merged_ranges(self.filename, offsets[first:stop], lengths[first:stop])

    def byte_lengths(self) -> np.ndarray:
        # A lookup touches only B-tree pages: a value's length is in its leaf node.
        txn = self._reader.get().txn()
        try:
            return np.fromiter((len(txn.get(image_key(i), b"")) for i in range(len(self))),
                               dtype=np.int64, count=len(self))
        except lmdb.Error as exc:
            raise StoreError(f"{self.filename}: cannot read the record index ({exc}); the file is damaged") from None

    def layout_problems(self) -> list[str]:
        reader = self._reader.get()
        try:
            return _key_problems(reader.txn(), len(self))
        except lmdb.Error as exc:
            reader.drop_txn()
            return [f"cannot walk the keys ({exc}); the file is damaged"]

    def close(self) -> None:
        """Release this process's handles (reading again reopens them); a forked child's
        inherited ones are not its to close."""
        reader = self._reader.take()
        if reader is not None:
            reader.close()


def _find_places(store: LmdbStore):
    """Where every value lies (see lmdb_layout), checked against two reads; False when the
    pages do not read as expected: then there are no hints, and reads go on."""
    try:
        stat = store._environment().stat()
        offsets, lengths = value_places(store.filename, stat["psize"], len(store), stat["leaf_pages"])
        with open(store.filename, "rb") as fh:
            for i in {0, len(store) - 1}:
                fh.seek(offsets[i])
                if fh.read(lengths[i]) != bytes(store.read(i)):
                    raise LayoutError(f"record {i} is not where its leaf node says")
        return offsets, lengths
    except (LayoutError, OSError, StoreError, lmdb.Error) as exc:
        log.info("%s: no read-ahead hints (%s)", store.filename, exc)
        return False


def _read_columns(txn: lmdb.Transaction, names, filename: str, psize: int) -> dict[str, bytes]:
    """The columns' bytes, copied out of the map. Their places are found in the B-tree and
    advised first: LMDB reads a cold value a page fault at a time (a million records hold
    some 60 MB of columns: a second that way, a tenth of one advised)."""
    keys = [LMDB_COLUMN_PREFIX + name.encode() for name in names]
    try:
        will_need([(filename, offset, length) for offset, length in key_places(filename, psize, keys).values()])
    except (LayoutError, OSError) as exc:
        log.debug("%s: columns not advised (%s)", filename, exc)
    buffers = {}
    for name, key in zip(names, keys):
        value = txn.get(key)
        if value is None:
            raise StoreError(f"{filename}: column {name} is missing; the file is damaged. Pack it again.")
        buffers[name] = bytes(value)
    return buffers


def _key_problems(txn: lmdb.Transaction, n: int) -> list[str]:
    """Image (and mask) keys beyond the ``n`` records, and journal keys of an unfinished pack."""
    stored = extra = journal = 0
    cursor = txn.cursor()
    if cursor.set_range(LMDB_IMAGE_PREFIX):
        for key in cursor.iternext(keys=True, values=False):
            key = bytes(key)
            if not key.startswith(LMDB_IMAGE_PREFIX):
                break
            stored += 1
            suffix = key[len(LMDB_IMAGE_PREFIX):].removesuffix(MASK_SUFFIX)   # a mask's key: its image's + suffix
            if not (suffix.isdigit() and int(suffix) < n and image_key(int(suffix)) == key.removesuffix(MASK_SUFFIX)):
                extra += 1
    if cursor.set_range(LMDB_JOURNAL_PREFIX):
        for key in cursor.iternext(keys=True, values=False):
            if not bytes(key).startswith(LMDB_JOURNAL_PREFIX):
                break
            journal += 1
    problems = []
    if extra:
        problems.append(f"{extra} image key(s) beyond the {n} records the metadata counts "
                        f"({stored} image keys stored)")
    if journal:
        problems.append(f"{journal} pack journal key(s) left: the pack did not finish")
    return problems
