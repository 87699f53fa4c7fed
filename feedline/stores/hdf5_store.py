"""HDF5 store: image bytes in one contiguous dataset, read through a memory map."""
from __future__ import annotations

import mmap
import os

import h5py
import numpy as np

from ..errors import StoreError
from ..format import COLUMN_NAMES, HDF5_IMAGES, HDF5_META_ATTR, HDF5_OFFSETS, Columns, parse_meta
from .base import Store


class Hdf5Store(Store):
    """h5py is used once, at open, to find the metadata and where the bytes lie; reads
    slice a numpy memory map of that region, so threads never take h5py's global lock."""

    kind = "hdf5"

    def __init__(self, filename: str):
        self.filename = filename
        try:
            fh = h5py.File(filename, "r")
        except OSError as exc:
            raise StoreError(f"{filename}: cannot open as HDF5 ({exc}); truncated or not an HDF5 file") from None
        with fh:
            if HDF5_META_ATTR not in fh.attrs:
                raise StoreError(f"{filename}: an HDF5 file, but not a feedline store (no 'meta' attribute)")
            self.meta = parse_meta(fh.attrs[HDF5_META_ATTR], filename)
            try:
                images = fh[HDF5_IMAGES]
                self.offsets = np.asarray(fh[HDF5_OFFSETS][...], dtype=np.int64)
                buffers = {name: np.asarray(fh[name][...]) for name in COLUMN_NAMES}
            except KeyError as exc:
                raise StoreError(f"{filename}: dataset {exc} is missing; the file is damaged. Pack it again.") from None
            self._data_offset = images.id.get_offset()
            self._data_size = int(images.shape[0])
            if images.chunks is not None or images.compression is not None:
                raise StoreError(f"{filename}: the images dataset is chunked or compressed; "
                                 "feedline writes it contiguous. Pack it again with feedline.")
        self.classes = list(self.meta["classes"])
        self.columns = Columns.from_buffers(buffers, self.meta["count"], filename)
        if len(self.offsets) != len(self.columns) + 1 or (len(self.offsets) and self.offsets[-1] != self._data_size):
            raise StoreError(f"{filename}: image offsets disagree with the data size; the file is damaged")
        if self._data_size and (self._data_offset is None
                                or self._data_offset + self._data_size > os.path.getsize(filename)):
            raise StoreError(f"{filename}: the file is truncated (image data runs past its end). Pack it again.")
        self._map = None

    def _data(self) -> np.ndarray:
        # np.memmap keeps no state shared with the parent after a fork but the mapping
        # itself, which is read-only and safe to share.
        if self._map is None:
            if self._data_size == 0:
                self._map = np.zeros(0, dtype=np.uint8)
            else:
                self._map = np.memmap(self.filename, dtype=np.uint8, mode="r",
                                      offset=self._data_offset, shape=(self._data_size,))
                try:
                    self._map._mmap.madvise(mmap.MADV_RANDOM)
                except (AttributeError, OSError):
                    pass
        return self._map

    def read(self, index: int):
        i = self._check(index)
        return self._data()[self.offsets[i]:self.offsets[i + 1]]

    def close(self) -> None:
        self._map = None
