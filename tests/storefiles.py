"""Write feedline LMDB and HDF5 files exactly as feedline/dataset/format.py documents them.

Independent of the converters, so the readers are tested against the contract itself,
and damaged files (a garbage record, a label out of range, a wrong size, a newer
format version) are easy to make on purpose.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import cv2
import h5py
import lmdb
import numpy as np

from feedline.dataset.format import (HDF5_IMAGES, HDF5_META_ATTR, HDF5_OFFSETS, LMDB_COLUMN_PREFIX, LMDB_META_KEY,
                             Columns, checksum, image_key, make_meta, meta_to_bytes)


@dataclass
class Records:
    """What a writer puts in a file: one entry per record, plus the class names."""

    images: list[bytes]
    labels: list[int]
    sizes: list[tuple[int, int]]   # (height, width)
    paths: list[str]
    classes: list[str]
    pack_options: dict = field(default_factory=lambda: {"quality": 90, "max_side": None})

    def __len__(self) -> int:
        return len(self.images)

    def meta(self, **overrides) -> dict:
        meta = make_meta(count=len(self), classes=self.classes, pack_options=self.pack_options,
                         source="/data/src", created="2024-01-02T03:04:05Z", feedline_version="0.1.0")
        meta.update(overrides)
        return meta

    def v1_meta(self, **overrides) -> dict:
        """The metadata of a file packed before checksums (format version 1)."""
        meta = self.meta(format_version=1, **overrides)
        del meta["checksum"]
        return meta

    def columns(self, with_checksums: bool = True) -> Columns:
        sums = [checksum(b) for b in self.images] if with_checksums else None
        return Columns.from_lists(self.labels, self.sizes, self.paths, sums)


def _with_checksums(meta: dict | None) -> bool:
    """Checksums are stored from format version 2 on, as feedline/dataset/format.py says."""
    return meta is None or not isinstance(meta.get("format_version"), int) or meta["format_version"] >= 2


def jpeg(height: int, width: int, seed: int = 0, gray: bool = False) -> bytes:
    """A small real JPEG with some texture, fast to make (no photo crop)."""
    rng = np.random.default_rng(seed)
    shape = (height, width) if gray else (height, width, 3)
    image = cv2.GaussianBlur(rng.integers(0, 256, shape, dtype=np.uint8), (5, 5), 0)
    ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return buf.tobytes()


def make_records(n: int = 12, classes: int = 3) -> Records:
    """``n`` real JPEGs of varied sizes, labels cycling through ``classes`` classes."""
    sizes = [(16 + 8 * (i % 4), 24 + 8 * (i % 3)) for i in range(n)]
    return Records(
        images=[jpeg(h, w, seed=i, gray=(i % 5 == 4)) for i, (h, w) in enumerate(sizes)],
        labels=[i % classes for i in range(n)],
        sizes=sizes,
        paths=[f"class_{i % classes}/img_{i:03d}.jpg" for i in range(n)],
        classes=[f"class_{k}" for k in range(classes)],
    )


def write_lmdb(path, records: Records, meta: dict | None = None, *, skip: tuple[int, ...] = (),
               extra_keys: dict[bytes, bytes] | None = None, with_meta: bool = True,
               map_size: int = 1 << 30, checksums: bool | None = None) -> str:
    """A single-file LMDB store. ``skip`` leaves those records out; ``extra_keys`` adds keys;
    ``checksums`` (default: as the metadata's version says) writes the checksums column."""
    checksums = _with_checksums(meta) if checksums is None else checksums
    path = str(path)
    env = lmdb.open(path, subdir=False, map_size=map_size, lock=False)
    try:
        with env.begin(write=True) as txn:
            if with_meta:
                txn.put(LMDB_META_KEY, meta_to_bytes(meta if meta is not None else records.meta()))
            for name, value in records.columns(checksums).to_bytes().items():
                txn.put(LMDB_COLUMN_PREFIX + name.encode(), value)
            # Keys in sorted order, so append mode keeps a million-record file fast to build.
            cursor = txn.cursor()
            cursor.putmulti(((image_key(i), data) for i, data in enumerate(records.images) if i not in skip),
                            append=True)
            for key, value in (extra_keys or {}).items():
                txn.put(key, value)
    finally:
        env.close()
    return path


def write_hdf5(path, records: Records, meta: dict | None = None, *, with_meta: bool = True,
               userblock_size: int = 0, checksums: bool | None = None) -> str:
    """An HDF5 store: one contiguous uint8 ``images`` dataset plus offsets and columns."""
    checksums = _with_checksums(meta) if checksums is None else checksums
    path = str(path)
    offsets = np.zeros(len(records) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in records.images], out=offsets[1:])
    blob = np.frombuffer(b"".join(records.images), dtype=np.uint8)
    cols = records.columns(checksums)
    with h5py.File(path, "w", userblock_size=userblock_size) as fh:
        if with_meta:
            fh.attrs[HDF5_META_ATTR] = json.dumps(meta if meta is not None else records.meta(), sort_keys=True)
        fh.create_dataset(HDF5_IMAGES, data=blob)
        fh.create_dataset(HDF5_OFFSETS, data=offsets)
        fh.create_dataset("labels", data=cols.labels)
        fh.create_dataset("sizes", data=cols.sizes)
        fh.create_dataset("path_offsets", data=cols.path_offsets)
        fh.create_dataset("path_bytes", data=cols.path_bytes)
        if cols.checksums is not None:
            fh.create_dataset("checksums", data=cols.checksums)
    return path


WRITERS = {"lmdb": write_lmdb, "hdf5": write_hdf5}
