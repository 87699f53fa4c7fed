"""HDF5 store: image bytes in one contiguous dataset, read through a memory map."""
from __future__ import annotations

import mmap
import os
from functools import partial

import h5py
import numpy as np

from ..errors import StoreError
from ..format import COLUMN_DTYPES, HDF5_IMAGES, HDF5_META_ATTR, HDF5_OFFSETS, parse_meta
from ..targets import TARGET_DTYPES
from .base import Store, column_names, load_columns, load_targets
from .process_local import ProcessLocal


def _meta_text(value) -> bytes | str:
    """The metadata attribute as text, whichever way HDF5 stored the string."""
    if isinstance(value, (str, bytes)):
        return value
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(()).item()
    if isinstance(value, np.void):
        value = value.tobytes()
    return value if isinstance(value, (str, bytes)) else str(value)


def _dataset(fh: h5py.File, name: str, filename: str):
    """``fh[name]``; a StoreError naming ``name`` when the file has no such object (h5py's own
    KeyError says "Unable to synchronously open object", for a missing and a damaged one alike)."""
    if name not in fh:
        raise StoreError(f"{filename}: dataset {name!r} is missing; the file is damaged. Pack it again.")
    return fh[name]


class Hdf5Store(Store):
    """h5py is used once, at open, to find the metadata and where the bytes lie; reads
    slice a numpy memory map of that region, so threads never take h5py's global lock."""

    kind = "hdf5"

    def __init__(self, filename: str):
        self.filename = filename
        try:
            fh = h5py.File(filename, "r")
        except (OSError, ValueError) as exc:
            raise StoreError(f"{filename}: cannot open as HDF5 ({exc}); truncated or not an HDF5 file") from None
        with fh:
            try:
                if HDF5_META_ATTR not in fh.attrs:
                    raise StoreError(f"{filename}: an HDF5 file, but not a feedline store (no 'meta' attribute)")
                self.meta = parse_meta(_meta_text(fh.attrs[HDF5_META_ATTR]), filename)
                images = _dataset(fh, HDF5_IMAGES, filename)
                self.offsets = np.ascontiguousarray(_dataset(fh, HDF5_OFFSETS, filename)[...],
                                                    dtype=np.int64).reshape(-1)
                # Cast on read: the columns keep their documented types whatever HDF5 stored.
                dtypes = COLUMN_DTYPES | TARGET_DTYPES
                buffers = {name: np.ascontiguousarray(_dataset(fh, name, filename)[...],
                                                      dtype=dtypes[name]).reshape(-1)
                           for name in column_names(self.meta)}
                if not isinstance(images, h5py.Dataset) or images.dtype != np.uint8 or images.ndim != 1:
                    raise StoreError(f"{filename}: the images dataset is not a flat uint8 array; "
                                     "the file is damaged. Pack it again.")
                self._data_offset = images.id.get_offset()
                self._data_size = int(images.shape[0])
                if images.chunks is not None or images.compression is not None:
                    raise StoreError(f"{filename}: the images dataset is chunked or compressed; "
                                     "feedline writes it contiguous. Pack it again with feedline.")
            except (KeyError, OSError, ValueError, TypeError, AttributeError) as exc:  # KeyError: present, unreadable
                detail = exc.args[0] if isinstance(exc, KeyError) else exc   # str() of a KeyError quotes its text
                raise StoreError(f"{filename}: cannot read the HDF5 layout ({detail}); the file is damaged. "
                                 "Pack it again.") from None
        self.classes = list(self.meta["classes"])
        self.columns = load_columns(buffers, self.meta["count"], filename)
        self._targets = load_targets(self.meta, buffers, self.meta["count"], filename)
        self._note_missing_checksums()
        offsets = self.offsets
        if (len(offsets) != len(self.columns) + 1 or offsets[0] < 0 or offsets[-1] != self._data_size
                or bool(np.any(offsets[1:] < offsets[:-1]))):
            raise StoreError(f"{filename}: image offsets disagree with the record count or the data size; "
                             "the file is damaged. Pack it again.")
        if self._data_size and (self._data_offset is None
                                or self._data_offset + self._data_size > os.path.getsize(filename)):
            raise StoreError(f"{filename}: the file is truncated (image data runs past its end). Pack it again.")
        # Each process maps the file itself (a forked child leaves its parent's map alone).
        self._map: ProcessLocal[np.ndarray] = ProcessLocal(partial(_map_images, filename, self._data_offset,
                                                                   self._data_size))

    def read(self, index: int):
        i = self._check(index)
        return self._map.get()[self.offsets[i]:self.offsets[i + 1]]

    def byte_lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def byte_ranges(self, first: int, stop: int) -> list[tuple[str, int, int]]:
        self._check_span(first, stop)
        start, end = int(self.offsets[first]), int(self.offsets[stop])
        return [(self.filename, self._data_offset + start, end - start)] if end > start else []

    def close(self) -> None:
        """Drop this process's map (records read stay valid while referenced); reading maps it again."""
        self._map.take()


def _map_images(filename: str, offset: int, size: int) -> np.ndarray:
    """The images dataset's bytes, mapped read-only and advised for random reads."""
    if size == 0:
        return np.zeros(0, dtype=np.uint8)
    data = np.memmap(filename, dtype=np.uint8, mode="r", offset=offset, shape=(size,))
    try:
        data._mmap.madvise(mmap.MADV_RANDOM)
    except (AttributeError, OSError):
        pass
    return data
