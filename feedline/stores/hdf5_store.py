"""HDF5 store: image bytes in one contiguous dataset, read through a memory map."""
from __future__ import annotations

import mmap
import os
from functools import partial

import h5py
import numpy as np

from ..core.errors import StoreError
from ..fields import per_pixel
from ..dataset.format import COLUMN_DTYPES, HDF5_IMAGES, HDF5_MASK_OFFSETS, HDF5_MASKS, HDF5_META_ATTR, HDF5_OFFSETS, parse_meta
from ..dataset.targets import TARGET_DTYPES
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
                self._masks = _masks_region(fh, filename) if per_pixel(self.meta.get("fields") or {}) else None
            except (KeyError, OSError, ValueError, TypeError, AttributeError) as exc:  # KeyError: present, unreadable
                detail = exc.args[0] if isinstance(exc, KeyError) else exc   # str() of a KeyError quotes its text
                raise StoreError(f"{filename}: cannot read the HDF5 layout ({detail}); the file is damaged. "
                                 "Pack it again.") from None
        self.classes = list(self.meta["classes"])
        self.columns = load_columns(buffers, self.meta["count"], filename)
        self._targets = load_targets(self.meta, buffers, self.meta["count"], filename)
        self._note_missing_checksums()
        _check_region(filename, "image", self.offsets, self._data_offset, self._data_size, len(self.columns))
        if self._masks is not None:
            _check_region(filename, "mask", self._masks[0], self._masks[1], self._masks[2], len(self.columns))
        # Each process maps the file itself (a forked child leaves its parent's maps alone).
        self._map: ProcessLocal[np.ndarray] = ProcessLocal(partial(_mapped, filename, self._data_offset,
                                                                   self._data_size))
        self._mask_map = None if self._masks is None else ProcessLocal(partial(_mapped, filename, *self._masks[1:]))

    def read(self, index: int):
        i = self._check(index)
        return self._map.get()[self.offsets[i]:self.offsets[i + 1]]

    def read_mask(self, index: int):
        if self._masks is None:
            return super().read_mask(index)
        i = self._check(index)
        offsets = self._masks[0]
        return self._mask_map.get()[offsets[i]:offsets[i + 1]]

    def byte_lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def byte_ranges(self, first: int, stop: int) -> list[tuple[str, int, int]]:
        self._check_span(first, stop)
        start, end = int(self.offsets[first]), int(self.offsets[stop])
        return [(self.filename, self._data_offset + start, end - start)] if end > start else []

    def close(self) -> None:
        """Drop this process's maps (records read stay valid while referenced); reading maps them again."""
        self._map.take()
        if self._mask_map is not None:
            self._mask_map.take()


def _mapped(filename: str, offset: int | None, size: int) -> np.ndarray:
    """``size`` bytes of the file at ``offset``, mapped read-only and advised for random reads."""
    if size == 0:
        return np.zeros(0, dtype=np.uint8)
    data = np.memmap(filename, dtype=np.uint8, mode="r", offset=offset, shape=(size,))
    try:
        data._mmap.madvise(mmap.MADV_RANDOM)
    except (AttributeError, OSError):
        pass
    return data


def _masks_region(fh: h5py.File, filename: str) -> tuple[np.ndarray, int | None, int]:
    """(offsets, file offset, size) of the stored masks (format version 5)."""
    masks = _dataset(fh, HDF5_MASKS, filename)
    if (not isinstance(masks, h5py.Dataset) or masks.dtype != np.uint8 or masks.ndim != 1
            or masks.chunks is not None or masks.compression is not None):
        raise StoreError(f"{filename}: the masks dataset is not a flat contiguous uint8 array; the file is "
                         "damaged. Pack it again.")
    offsets = np.ascontiguousarray(_dataset(fh, HDF5_MASK_OFFSETS, filename)[...], dtype=np.int64).reshape(-1)
    return offsets, masks.id.get_offset(), int(masks.shape[0])


def _check_region(filename: str, what: str, offsets: np.ndarray, start: int | None, size: int, count: int) -> None:
    if (len(offsets) != count + 1 or offsets[0] < 0 or offsets[-1] != size
            or bool(np.any(offsets[1:] < offsets[:-1]))):
        raise StoreError(f"{filename}: {what} offsets disagree with the record count or the data size; "
                         "the file is damaged. Pack it again.")
    if size and (start is None or start + size > os.path.getsize(filename)):
        raise StoreError(f"{filename}: the file is truncated ({what} data runs past its end). Pack it again.")
