"""The on-disk formats: the contract between converters (writers) and stores (readers).

A record is the encoded image, its targets, its (height, width), its source path
relative to the packed folder and the checksum of its bytes. Per-record metadata lives
in columns shared by both formats; the data-set metadata is one JSON object (format,
format_version, checksum, count, classes, pack_options, source, created, feedline_version;
fields, class_lists, shard when present: ``make_meta``). No pickle anywhere.

Versions: 2 adds the ``checksums`` column (xxh3_64 of each record's bytes, computed
at pack time, checked by ``Store.read_checked``). Version-1 files still open, without
checksums. 3 adds fields beyond one label (`feedline.fields`: several labels, numeric
targets, boxes, keypoints): the metadata's ``"fields"`` names them with their specs, and each
has its columns. 4 gives each field with classes its own class list and numbering: the
metadata's ``"class_lists"`` maps each such field to its list (``"classes"`` repeats the
label's list, or else the first field's, for tools that read one list). In versions 1 to 3
every field shares ``"classes"``, and is read so. 5 adds masks beside the images (`feedline.fields.mask`);
other stores are version 4, or 2 with the label alone (older feedlines read those too). A reader refuses
an unknown version, naming both.

LMDB (one file, ``subdir=False``)::

    feedline/meta               JSON (see ``make_meta``)
    feedline/col/labels         int64[n]      little endian
    feedline/col/sizes          int32[n, 2]   (height, width)
    feedline/col/path_offsets   int64[n + 1]
    feedline/col/path_bytes     uint8[...]    UTF-8 paths, concatenated
    feedline/col/checksums      uint64[n]     little endian, xxh3_64 of each record (version 2)
    feedline/col/label_set_offsets ...       the columns of the fields (version 3; see
                                             `feedline.dataset.targets`); labels is -1 without a label field
    img/0000000000[.mask] ...   encoded image of record i (``image_key(i)``); its mask (``+ MASK_SUFFIX``, v5)
    feedline/journal/00000000   only in an unfinished pack: resume bookkeeping

HDF5::

    attrs["meta"]               the same JSON
    images                      uint8[total], contiguous, uncompressed (memory-mappable)
    offsets                     int64[n + 1]  record i is images[offsets[i]:offsets[i+1]] (v5: masks, mask_offsets)
    labels, sizes, path_offsets, path_bytes, checksums, fields' columns: the columns as datasets

Sharded data sets: OUT-00000-of-00004.lmdb ... (``shard_name``), each a complete store
whose metadata adds ``"shard": {"index": k, "of": n, "pack_id": ...}`` (``pack_id`` is
the same in every shard of one pack), plus one index, OUT.shards.json (``shard_index``)::

    {"format": "feedline-shards", "version": 1, "format_version": 2, "kind": "lmdb",
     "count": ..., "classes": [...], "checksums": true, "pack_id": "...",
     "pack_options": {...}, "source": "...",
     "shards": [{"file": "OUT-00000-of-00004.lmdb", "count": ...}, ...]}

Shard files are named relative to the index's folder, so the set can be moved whole.
The records of shard k follow those of shard k - 1: one global numbering.
"""
from __future__ import annotations

import json
import os
import sys
from array import array
from dataclasses import dataclass
from itertools import accumulate, chain
from typing import TYPE_CHECKING

import xxhash

if TYPE_CHECKING:
    import numpy as np

from ..core.errors import StoreError
from ..fields import LABEL_ONLY, FieldsError, check_class_lists, check_fields, class_fields, per_pixel

FORMAT_NAME = "feedline"
FORMAT_VERSION = 5                 # the newest version this code writes (masks beside the images)
LABEL_ONLY_VERSION = 2             # what it writes for a store with the label alone
KNOWN_VERSIONS = (1, 2, 3, 4, 5)   # what it reads
CLASS_LISTS_VERSION = 4            # the first with a class list per field; what it writes without masks
CHECKSUM_NAME = "xxh3_64"          # the algorithm, recorded in the metadata

# The checksum of one record's bytes (any bytes-like object), as an int < 2**64.
# xxh3 hashes tens of GB/s: a few microseconds per image, against milliseconds of decode.
checksum = xxhash.xxh3_64_intdigest

LMDB_META_KEY = b"feedline/meta"
LMDB_COLUMN_PREFIX = b"feedline/col/"
LMDB_JOURNAL_PREFIX = b"feedline/journal/"
LMDB_IMAGE_PREFIX = b"img/"
COLUMN_NAMES = ("labels", "sizes", "path_offsets", "path_bytes")   # in every version
CHECKSUMS = "checksums"                                             # version 2 on
COLUMN_DTYPES = {"labels": "<i8", "sizes": "<i4", "path_offsets": "<i8", "path_bytes": "u1",
                 CHECKSUMS: "<u8"}

HDF5_META_ATTR = "meta"
HDF5_IMAGES = "images"
HDF5_OFFSETS = "offsets"
HDF5_MASKS, HDF5_MASK_OFFSETS = "masks", "mask_offsets"
MASK_SUFFIX = b".mask"   # record i's mask key: its image's, then this, so it sorts right after the image


def image_key(index: int) -> bytes:
    return LMDB_IMAGE_PREFIX + b"%010d" % index


def journal_key(chunk: int) -> bytes:
    return LMDB_JOURNAL_PREFIX + b"%08d" % chunk


def column_bytes(labels: list[int], sizes: list[list[int]], paths: list[str],
                 checksums: list[int]) -> dict[str, bytes]:
    """The stored bytes of each column (``COLUMN_DTYPES``, little endian), in storage
    order, from the lists a pack collects. Without numpy, which a pack of JPEGs stored as
    they are to LMDB does not otherwise need (its import is a third of the start-up of
    `feedline pack`)."""
    encoded = [p.encode("utf-8") for p in paths]
    columns = {"labels": array("q", labels), "sizes": array("i", chain.from_iterable(sizes)),
               "path_offsets": array("q", accumulate(map(len, encoded), initial=0)),
               CHECKSUMS: array("Q", checksums)}
    if sys.byteorder == "big":
        for column in columns.values():
            column.byteswap()
    if len(columns["sizes"]) != 2 * len(columns["labels"]) or columns["sizes"].itemsize != 4:
        raise ValueError(f"sizes must be {len(labels)} (height, width) pairs of 32-bit ints")
    return {"labels": columns["labels"].tobytes(), "sizes": columns["sizes"].tobytes(),
            "path_offsets": columns["path_offsets"].tobytes(), "path_bytes": b"".join(encoded),
            CHECKSUMS: columns[CHECKSUMS].tobytes()}


@dataclass
class Columns:
    """Per-record metadata as flat numpy arrays: cheap to open, no per-record objects.
    (numpy is imported by the methods that make arrays, not with this module: writers
    store `column_bytes` and need no numpy.)"""

    labels: np.ndarray        # int64 (n,)
    sizes: np.ndarray         # int32 (n, 2): height, width
    path_offsets: np.ndarray  # int64 (n + 1,)
    path_bytes: np.ndarray    # uint8, UTF-8
    checksums: np.ndarray | None = None  # uint64 (n,); None in version-1 files and folders

    @classmethod
    def from_lists(cls, labels, sizes, paths, checksums=None) -> "Columns":
        import numpy as np
        encoded = [p.encode("utf-8") for p in paths]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        return cls(
            labels=np.asarray(labels, dtype=np.int64).reshape(-1),
            sizes=np.asarray(sizes, dtype=np.int32).reshape(-1, 2),
            path_offsets=offsets,
            path_bytes=np.frombuffer(b"".join(encoded), dtype=np.uint8),
            checksums=None if checksums is None else np.asarray(checksums, dtype=np.uint64).reshape(-1),
        )

    @property
    def names(self) -> tuple[str, ...]:
        """The columns present, in storage order."""
        return COLUMN_NAMES + ((CHECKSUMS,) if self.checksums is not None else ())

    def __len__(self) -> int:
        return len(self.labels)

    def path(self, index: int) -> str:
        start, end = self.path_offsets[index], self.path_offsets[index + 1]
        return self.path_bytes[start:end].tobytes().decode("utf-8")

    def to_bytes(self) -> dict[str, bytes]:
        return {name: self.array(name).tobytes() for name in self.names}

    def array(self, name: str) -> np.ndarray:
        """Column ``name`` as a contiguous array of its documented type."""
        import numpy as np
        return np.ascontiguousarray(getattr(self, name), dtype=COLUMN_DTYPES[name])

    @classmethod
    def from_buffers(cls, buffers: dict, count: int, where: str) -> "Columns":
        """Columns from raw buffers (LMDB values or HDF5 arrays), checked against ``count``.
        ``buffers`` holds the checksums too when the file has them."""
        import numpy as np
        arrays = {name: np.frombuffer(buffers[name], dtype=COLUMN_DTYPES[name])
                  for name in (*COLUMN_NAMES, CHECKSUMS) if name in buffers}
        cols = cls(labels=arrays["labels"], sizes=arrays["sizes"].reshape(-1, 2),
                   path_offsets=arrays["path_offsets"], path_bytes=arrays["path_bytes"],
                   checksums=arrays.get(CHECKSUMS))
        if (len(cols.labels) != count or len(cols.sizes) != count
                or len(cols.path_offsets) != count + 1
                or (cols.checksums is not None and len(cols.checksums) != count)):
            raise StoreError(f"{where}: column lengths disagree with the record count {count}; "
                             "the file is damaged. Pack it again.")
        return cols


def make_meta(*, count: int, classes: list[str], pack_options: dict, source: str,
              created: str, feedline_version: str, shard: dict | None = None, fields: dict | None = None,
              class_lists: dict[str, list[str]] | None = None) -> dict:
    """The data-set metadata; with fields beyond label, ``class_lists`` (field -> its classes) replace ``classes``."""
    extra = {} if shard is None else {"shard": shard}
    if fields is not None and fields != LABEL_ONLY:
        extra["fields"] = check_fields(fields)
        extra["class_lists"] = {name: list((class_lists or {}).get(name, [])) for name in class_fields(fields)}
        classes = next(iter(extra["class_lists"].values()), [])
    version = FORMAT_VERSION if per_pixel(extra.get("fields", {})) else CLASS_LISTS_VERSION if "fields" in extra \
        else LABEL_ONLY_VERSION
    return extra | {"format": FORMAT_NAME, "format_version": version, "checksum": CHECKSUM_NAME, "count": count,
                    "classes": list(classes), "pack_options": pack_options, "source": source, "created": created,
                    "feedline_version": feedline_version}


def meta_to_bytes(meta: dict) -> bytes:
    return json.dumps(meta, sort_keys=True).encode("utf-8")


def _json_object(raw: bytes | str, where: str, format_name: str, what: str) -> dict:
    """The JSON object in ``raw`` whose "format" is ``format_name``; StoreError otherwise."""
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise StoreError(f"{where}: not valid JSON ({exc}); not {what}") from None
    if not isinstance(value, dict) or value.get("format") != format_name:
        raise StoreError(f"{where}: not {what} (no \"format\": \"{format_name}\")")
    return value


def parse_meta(raw: bytes | str, where: str) -> dict:
    """Parse and check data-set metadata; a clear StoreError for anything else."""
    meta = _json_object(raw, where, FORMAT_NAME, "a feedline store")
    version = meta.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version not in KNOWN_VERSIONS:
        known = ", ".join(map(str, KNOWN_VERSIONS))
        newer = isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION
        advice = ("it was packed by a newer feedline: upgrade feedline (from a newer clone: pip install .), "
                  "or pack the image folder again with this one" if newer else
                  "the metadata is damaged or not feedline's: pack the image folder again")
        raise StoreError(f"{where}: format version {version!r}, but this feedline reads versions {known} "
                         f"(and writes {FORMAT_VERSION}); {advice}")
    if not isinstance(meta.get("count"), int) or not isinstance(meta.get("classes"), list):
        raise StoreError(f"{where}: metadata lacks count or classes; the file is damaged")
    if version >= 2 and meta.get("checksum") != CHECKSUM_NAME:
        raise StoreError(f"{where}: checksum algorithm {meta.get('checksum')!r}, but this feedline "
                         f"knows only {CHECKSUM_NAME!r}; the metadata is damaged. Pack the image folder again.")
    if version >= 3:
        try:
            meta["fields"] = check_fields(meta.get("fields"))
            if version >= CLASS_LISTS_VERSION:
                meta["class_lists"] = check_class_lists(meta.get("class_lists"), meta["fields"])
        except FieldsError as exc:
            raise StoreError(f"{where}: the metadata's fields are damaged ({exc}). Pack it again.") from None
    return meta


def fields_of(meta: dict) -> dict[str, dict]:
    """The fields of a file with this (parsed) metadata: the label alone before version 3."""
    return meta.get("fields") or dict(LABEL_ONLY)


def class_lists_of(meta: dict) -> dict[str, list[str]]:
    """Each field's class list (field -> names): before version 4, every field with classes
    shares the one list ``"classes"``."""
    if "class_lists" in meta:
        return {name: list(v) for name, v in meta["class_lists"].items()}
    return {name: list(meta.get("classes", [])) for name in class_fields(fields_of(meta))}


def has_checksums(meta: dict) -> bool:
    """Whether a file with this (parsed) metadata stores a checksums column."""
    return meta.get("format_version", 1) >= 2


# -- sharded data sets ------------------------------------------------------------------

SHARD_INDEX_FORMAT = "feedline-shards"
SHARD_INDEX_VERSION = 1
SHARD_INDEX_SUFFIX = ".shards.json"


def shard_name(out: str, index: int, count: int) -> str:
    """OUT.lmdb -> OUT-00002-of-00004.lmdb."""
    stem, ext = os.path.splitext(out)
    return f"{stem}-{index:05d}-of-{count:05d}{ext}"


def shard_index(out: str) -> str:
    """OUT.lmdb -> OUT.shards.json: the index that names the shards."""
    return os.path.splitext(out)[0] + SHARD_INDEX_SUFFIX


def parse_shard_index(raw: bytes | str, where: str) -> dict:
    """Parse and check a shard index; a clear StoreError for anything else."""
    index = _json_object(raw, where, SHARD_INDEX_FORMAT, "a feedline shard index")
    version = index.get("version")
    if version != SHARD_INDEX_VERSION:
        raise StoreError(f"{where}: shard index version {version!r}, but this feedline reads version "
                         f"{SHARD_INDEX_VERSION}; upgrade feedline, or write the index again with "
                         "`feedline pack --join OUT`")
    shards = index.get("shards")
    if (not isinstance(shards, list) or not shards or not isinstance(index.get("classes"), list)
            or not all(isinstance(s, dict) and isinstance(s.get("file"), str) and isinstance(s.get("count"), int)
                       for s in shards)):
        raise StoreError(f"{where}: the shard index lacks its shards or classes; it is damaged. "
                         "Write it again with `feedline pack --join OUT`")
    return index
