"""Shards read as one data set: one record numbering across the files, in shard order.

Opened from a shard index (OUT.shards.json), a glob or a list of files. The set is
checked when it opens, so that bad input fails before any training starts: every
shard present once, all of the same pack (``pack_id``), format version, format and
class list, and each holding the record count the index states. Files without shard
metadata (stores packed separately) may be combined too when their classes and
versions agree; they keep the order given.

Opening costs one pass of numpy over the columns (no Python object per record): the
labels, sizes, checksums and paths of all shards are concatenated once, and each
shard's own columns become views into them, so memory is not doubled.
"""
from __future__ import annotations

import glob
import logging
import os
from bisect import bisect_right

import numpy as np

from ..core.errors import ChecksumError, StoreError
from ..fields import KINDS
from ..dataset.format import Columns, parse_shard_index
from ..dataset.targets import TargetColumns
from .base import Store
from .detect import open_file

log = logging.getLogger(__name__)

_SIDE_FILES = (".errors.csv", ".partial", ".partial.images", ".partial.journal", ".partial.masks", ".partial.lock", ".json")


class ShardedStore(Store):
    """Thread- and fork-safe as its shards are: ``read`` finds the shard and delegates."""

    def __init__(self, stores: list[Store], name: str, index: dict | None = None):
        self._stores = stores
        self.filename = name
        self.shard_files = [s.filename for s in stores]
        first = stores[0]
        self.kind = first.kind
        self.classes = list(first.classes)
        lengths = [len(s) for s in stores]
        self._starts = [0, *np.cumsum(lengths).tolist()]
        self.columns = _join_columns(stores)
        self._targets = TargetColumns.concat([s.target_columns for s in stores])
        source = index or first.meta
        self.meta = {"format": first.meta.get("format"), "format_version": first.meta.get("format_version"),
                     "count": len(self.columns), "classes": self.classes,
                     "pack_options": _common_options(stores), "source": source.get("source"),
                     "created": first.meta.get("created"), "feedline_version": first.meta.get("feedline_version"),
                     "shards": [os.path.basename(f) for f in self.shard_files]}
        if "fields" in first.meta:
            self.meta["fields"] = self._targets.fields
        if "class_lists" in first.meta:
            self.meta["class_lists"] = first.meta["class_lists"]

    # -- opening --------------------------------------------------------------------------------

    @classmethod
    def from_paths(cls, paths: list[str], name: str | None = None) -> "ShardedStore":
        if not paths:
            raise StoreError("an empty list of shard files: name at least one packed file")
        seen: dict[str, str] = {}
        for path in paths:
            real = os.path.realpath(path)
            if real in seen:
                raise StoreError(f"{path}: listed twice (also as {seen[real]}); name each shard once")
            seen[real] = path
        stores = _open_all(paths)
        try:
            stores = _in_shard_order(stores)
        except StoreError:
            _close_all(stores)
            raise
        return cls(stores, name or _describe_list(paths))

    @classmethod
    def from_glob(cls, pattern: str) -> "ShardedStore":
        matches = sorted(glob.glob(pattern))
        shards = [m for m in matches if not m.endswith(_SIDE_FILES) and not os.path.isdir(m)]
        if not shards:
            also = f" (only {len(matches)} side file(s) or folder(s))" if matches else ""
            raise StoreError(f"{pattern}: the pattern matches no shard file{also}; check the path, "
                             "or open the index OUT.shards.json")
        return cls.from_paths(shards, name=pattern)

    @classmethod
    def from_index(cls, path: str) -> "ShardedStore":
        try:
            with open(path, "rb") as fh:
                index = parse_shard_index(fh.read(), path)
        except OSError as exc:
            raise StoreError(f"{path}: cannot read ({exc.strerror})") from None
        folder = os.path.dirname(os.path.abspath(path))
        files = [os.path.join(folder, s["file"]) for s in index["shards"]]
        for entry, file in zip(index["shards"], files, strict=True):
            if not os.path.exists(file):
                raise StoreError(f"{path}: shard {entry['file']} is missing (no {file}); copy it next to "
                                 "the index, or pack that shard again (feedline pack ... --shard-index K)")
        if len(set(map(os.path.realpath, files))) < len(files):
            raise StoreError(f"{path}: the index names a shard twice; write it again with `feedline pack --join OUT`")
        stores = _open_all(files)
        try:
            check_against_index(stores, index, path)
        except StoreError:
            _close_all(stores)
            raise
        return cls(stores, path, index)

    @property
    def stores(self) -> list[Store]:
        """The shards, in order."""
        return list(self._stores)

    # -- the Store interface ----------------------------------------------------------------------

    def _locate(self, index: int) -> tuple[Store, int]:
        k = bisect_right(self._starts, index) - 1
        return self._stores[k], index - self._starts[k]

    def read(self, index: int):
        store, local = self._locate(self._check(index))
        return store.read(local)

    def read_mask(self, index: int):
        store, local = self._locate(self._check(index))
        return store.read_mask(local)

    def mismatch_error(self, index: int, expected: int, actual: int, what: str = "the bytes") -> ChecksumError:
        store, local = self._locate(index)
        error = store.mismatch_error(local, expected, actual, what)
        return ChecksumError(f"{self.filename}: record {index}, in shard {error}", store.filename, index,
                             error.path, detail=f"in shard {store.filename}, {error.detail}")

    def byte_ranges(self, first: int, stop: int) -> list[tuple[str, int, int]]:
        self._check_span(first, stop)
        ranges = []
        for store, start in zip(self._stores, self._starts):
            lo, hi = max(first, start), min(stop, start + len(store))
            if lo < hi:
                ranges += store.byte_ranges(lo - start, hi - start)
        return ranges

    def byte_lengths(self) -> np.ndarray:
        return np.concatenate([s.byte_lengths() for s in self._stores])   # a set has at least one shard

    def shard_counts(self) -> tuple[int, ...]:
        return tuple(len(s) for s in self._stores)

    def layout_problems(self) -> list[str]:
        return [f"shard {os.path.basename(s.filename)}: {p}" for s in self._stores for p in s.layout_problems()]

    def files(self) -> list[str]:
        return list(self.shard_files)

    def before_fork(self) -> None:
        for store in self._stores:
            store.before_fork()

    def close(self) -> None:
        for store in self._stores:
            store.close()

    def __repr__(self) -> str:
        return (f"<ShardedStore {self.filename!r}: {len(self)} records in {len(self._stores)} {self.kind} shards, "
                f"{len(self.classes)} classes>")


def _open_all(paths: list[str]) -> list[Store]:
    stores: list[Store] = []
    try:
        for path in paths:
            stores.append(open_file(path))
    except StoreError:
        _close_all(stores)
        raise
    check_alike(stores)
    return stores


def _close_all(stores: list[Store]) -> None:
    for store in stores:
        store.close()


def check_alike(stores: list[Store]) -> None:
    """Same format, version and classes; either all shards of one pack or none."""
    first = stores[0]
    for other in stores[1:]:
        where = f"{other.filename} and {first.filename}"
        if other.kind != first.kind:
            raise StoreError(f"{where}: shards of different formats ({other.kind}, {first.kind}); "
                             "a data set is all LMDB or all HDF5")
        a, b = other.meta.get("format_version"), first.meta.get("format_version")
        if a != b:
            raise StoreError(f"{where}: shards of different format versions ({a}, {b}); pack them again "
                             "together with one feedline")
        if other.classes != first.classes:
            diff = next((f"class {k}: {x!r} vs {y!r}" for k, (x, y) in enumerate(zip(other.classes, first.classes))
                         if x != y), f"{len(other.classes)} vs {len(first.classes)} classes")
            raise StoreError(f"{where}: shards with different class lists ({diff}); their labels would "
                             "disagree. Pack them again together")
        if other.class_lists != first.class_lists:
            raise StoreError(f"{where}: shards with different class lists per field; their classes would "
                             "disagree. Pack them again together")
        if _shape_of(other.fields) != _shape_of(first.fields):
            raise StoreError(f"{where}: shards with different fields ({', '.join(other.fields)}; "
                             f"{', '.join(first.fields)}); pack them again from one labels file")
        if ("shard" in other.meta) != ("shard" in first.meta):
            raise StoreError(f"{where}: one is a shard of a sharded pack and the other is not")
        if "shard" in first.meta and other.meta["shard"].get("pack_id") != first.meta["shard"].get("pack_id"):
            raise StoreError(f"{where}: shards of different packs (packed from other files or with other "
                             "options); pack them again together")


def _shape_of(fields: dict) -> dict:
    """What must agree between shards: the fields and their specs, but for what joining them
    settles (the most labels or boxes of one record: `Field.joined_spec`)."""
    return {name: {k: v for k, v in spec.items() if k not in KINDS[name].joined_keys}
            for name, spec in fields.items()}


def _in_shard_order(stores: list[Store]) -> list[Store]:
    """Shards of one pack in their index order, each once and none missing; others as given."""
    if "shard" not in stores[0].meta:
        return stores
    count = stores[0].meta["shard"].get("of")
    by_index: dict[int, Store] = {}
    for store in stores:
        k = store.meta["shard"].get("index")
        if k in by_index:
            raise StoreError(f"{store.filename} and {by_index[k].filename} are both shard {k} of {count}; "
                             "keep one")
        by_index[k] = store
    missing = [k for k in range(count) if k not in by_index]
    if missing:
        names = ", ".join(str(k) for k in missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise StoreError(f"{stores[0].filename}: shard(s) {names} of {count} missing from the set; "
                         "give every shard (a glob such as OUT-*-of-*.lmdb, or the index OUT.shards.json)")
    for k, store in by_index.items():
        if k not in range(count):   # every index 0 .. count - 1 is here: this one is extra
            raise StoreError(f"{store.filename}: shard {k!r} of {count}, not one of 0..{count - 1}: its metadata "
                             "is damaged. Pack that shard again")
    return [by_index[k] for k in range(count)]


def check_against_index(stores: list[Store], index: dict, where: str) -> None:
    for entry, store in zip(index["shards"], stores, strict=True):
        if len(store) != entry["count"]:
            raise StoreError(f"{where}: shard {entry['file']} holds {len(store)} records, the index says "
                             f"{entry['count']}: it was replaced or packed again. Write the index again with "
                             "`feedline pack --join OUT`")
        if "shard" in store.meta and store.meta["shard"].get("pack_id") != index.get("pack_id"):
            raise StoreError(f"{where}: shard {entry['file']} belongs to another pack than the index; "
                             "write the index again with `feedline pack --join OUT`")
    if stores[0].classes != index["classes"]:
        raise StoreError(f"{where}: the index's classes differ from its shards'; write it again with "
                         "`feedline pack --join OUT`")
    if index.get("format_version") != stores[0].meta.get("format_version"):
        raise StoreError(f"{where}: the index says format version {index.get('format_version')}, the shards "
                         f"are version {stores[0].meta.get('format_version')}; write it again with "
                         "`feedline pack --join OUT`")


def _join_columns(stores: list[Store]) -> Columns:
    """All shards' columns end to end; each shard's arrays become views into them."""
    cols = [s.columns for s in stores]
    sums = [c.checksums for c in cols]
    path_lengths = [len(c.path_bytes) for c in cols]
    path_starts = np.cumsum([0, *path_lengths])
    offsets = np.concatenate([c.path_offsets[:-1] + base for c, base in zip(cols, path_starts[:-1], strict=True)]
                             + [path_starts[-1:]]).astype(np.int64)
    joined = Columns(labels=np.concatenate([c.labels for c in cols]),
                     sizes=np.concatenate([c.sizes for c in cols]).reshape(-1, 2),
                     path_offsets=offsets,
                     path_bytes=np.concatenate([c.path_bytes for c in cols]),
                     checksums=None if any(s is None for s in sums) else np.concatenate(sums))
    start = 0
    for c, pbase, plen in zip(cols, path_starts[:-1], path_lengths, strict=True):
        stop = start + len(c)
        c.labels, c.sizes = joined.labels[start:stop], joined.sizes[start:stop]
        c.path_bytes = joined.path_bytes[pbase:pbase + plen]
        if joined.checksums is not None:
            c.checksums = joined.checksums[start:stop]
        start = stop
    return joined


def _common_options(stores: list[Store]) -> dict:
    """The pack options every shard shares (all of them, for shards of one pack): what
    holds for the whole set, e.g. that every record was decode-checked."""
    options = [s.meta.get("pack_options") or {} for s in stores]
    return {k: v for k, v in options[0].items() if all(o.get(k, object()) == v for o in options[1:])}


def _describe_list(paths: list[str]) -> str:
    return paths[0] if len(paths) == 1 else f"{paths[0]} (+{len(paths) - 1} more shards)"
