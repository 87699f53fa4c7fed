"""What a store answers about a record's targets beyond its columns: its fields' values, and
its segmentation mask (each kind of store says where a mask's bytes lie: ``read_mask``)."""
from __future__ import annotations

import numpy as np

from ..core.errors import ChecksumError, FeedlineError, StoreError
from ..fields import per_pixel
from ..dataset.format import checksum
from ..dataset.mask_codec import decode, read_png, values_of


class RecordTargets:
    """A Store's part for a record's targets (a mixin of `base.Store`, which gives ``_check``,
    ``target_columns``, ``columns``, ``fields``, ``path``, ``filename`` and ``mismatch_error``)."""

    def targets(self, index: int) -> dict:
        """Record ``index``'s targets as plain values, one entry per field (see `TargetColumns.record`);
        a mask as its class indices (`mask`)."""
        i = self._check(index)
        return self.target_columns.record(i) | {name: self.mask(i) for name in per_pixel(self.fields)}

    def read_mask(self, index: int):
        """The stored mask of record ``index`` (bytes-like, `feedline.dataset.mask_codec`; a folder's: its
        PNG file). StoreError for a store without masks."""
        raise StoreError(f"{self.filename}: no masks: its labels had no mask column")

    def read_mask_checked(self, index: int):
        """``read_mask(index)``, checked against the mask's checksum stored at pack time."""
        i = self._check(index)
        data = self.read_mask(i)
        sums = self.target_columns.arrays.get("mask_checksums") if self.columns.checksums is not None else None
        if sums is not None:
            actual = checksum(data)
            if actual != int(sums[i]):
                raise self.mismatch_error(i, int(sums[i]), actual, what="its mask's bytes")
        return data

    def mask(self, index: int) -> np.ndarray:
        """Record ``index``'s mask as class indices: H x W, uint8 or uint16 (checksum checked)."""
        return self._decoded_mask(self.read_mask_checked(index), index)

    def _decoded_mask(self, data, index: int) -> np.ndarray:
        if self.fields[per_pixel(self.fields)[0]]["codec"] == "png":
            return read_png(data, f"{self.filename}: record {index} ({self.path(index)})'s mask")
        return decode(data)

    def mask_problem(self, index: int, pixels: bool) -> str | None:
        """What is wrong with record ``index``'s mask (None: nothing): its bytes against their
        checksum and, with ``pixels``, whether it decodes to its image's size with only the
        classes the metadata lists."""
        try:
            mask = self._decoded_mask(self.read_mask_checked(index), index) if pixels else self.read_mask_checked(index)
        except ChecksumError as exc:
            return f"mask checksum mismatch: {exc.detail}"
        except FeedlineError as exc:
            return f"mask: {exc}"
        if not pixels:
            return None
        expected = self.size(index)
        if mask.shape != expected and min(expected) > 0:
            return f"mask: decodes to {mask.shape[0]}x{mask.shape[1]} (HxW), its image is {expected[0]}x{expected[1]}"
        listed = self.fields[per_pixel(self.fields)[0]].get("values")
        unlisted = np.setdiff1d(values_of(mask), listed) if listed is not None else []
        if len(unlisted):
            return f"mask: holds class(es) {unlisted[:5].tolist()} that the metadata's values do not list"
        return None
