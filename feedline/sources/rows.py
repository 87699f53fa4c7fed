"""How a worker writes a sample into a row of a Slot's memory: numpy and OpenCV only (no
torch), so a worker process imports only what it uses.

A RowFormat says what a row of a Slot's arena is: uint8 pixels (N x H x W x 3, for a CUDA
Finisher or an output dtype numpy lacks), or the host batch the consumer receives,
normalized into the output's dtype and layout with a lookup table (uint8 level -> value);
and, for a store with masks, after the pixels, the batch's masks (N x H x W class indices in
the delivered dtype), which the consumer hands over as they are.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RowFormat:
    """The layout of one arena: ``batch`` rows of ``size`` (H, W). ``dtype``: numpy's name of
    the row's dtype ("uint8", "float32", "float16"); ``channels_last``: H x W x 3 rows (always
    for pixels), else 3 x H x W; ``table``: uint8 level -> normalized value per channel
    (1 x 256 x 3 float32), None for pixels; ``mask_dtype``: numpy's name of the masks' dtype
    when the rows carry masks (after the pixels, at ``mask_offset``), else None."""

    batch: int
    size: tuple[int, int]
    dtype: str = "uint8"
    channels_last: bool = True
    table: np.ndarray | None = None
    mask_dtype: str | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        h, w = self.size
        return (self.batch, h, w, 3) if self.channels_last else (self.batch, 3, h, w)

    @property
    def mask_shape(self) -> tuple[int, int, int]:
        return (self.batch, *self.size)

    @property
    def mask_offset(self) -> int:
        """Where the masks start: after the pixels, on a 64-byte boundary."""
        return -(-int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize // 64) * 64

    @property
    def nbytes(self) -> int:
        if self.mask_dtype is None:
            return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize
        return self.mask_offset + int(np.prod(self.mask_shape)) * np.dtype(self.mask_dtype).itemsize

    @property
    def in_place(self) -> bool:
        """Whether a row is the decoded sample itself (uint8 H x W x 3)."""
        return self.dtype == "uint8" and self.channels_last and self.table is None


class RowWriter:
    """One worker's view of one arena: where sample j is decoded (``buffer``) and how it is
    written into row j (``write``). Its scratch is its own: one writer per worker and arena."""

    def __init__(self, fmt: RowFormat, memory):
        self.fmt = fmt
        self.rows = np.frombuffer(memory, dtype=fmt.dtype, count=int(np.prod(fmt.shape))).reshape(fmt.shape)
        self.masks = None if fmt.mask_dtype is None else np.frombuffer(
            memory, dtype=fmt.mask_dtype, count=int(np.prod(fmt.mask_shape)), offset=fmt.mask_offset).reshape(fmt.mask_shape)
        self._scratch = np.empty((*fmt.size, 3), dtype=np.uint8)
        self._converted = np.empty((*fmt.size, 3), dtype=np.float32) if fmt.table is not None else None

    def buffer(self, j: int) -> np.ndarray:
        """uint8 H x W x 3: row j itself when it holds the pixels, else scratch."""
        return self.rows[j] if self.fmt.in_place else self._scratch

    def mask(self, j: int) -> np.ndarray:
        """Row j's mask (H x W, the delivered dtype), written in place."""
        return self.masks[j]

    def write(self, j: int, sample: np.ndarray) -> None:
        """``sample`` (uint8 H x W x 3) into row j: as it is, or normalized and cast."""
        row = self.rows[j]
        if self.fmt.in_place:
            if sample is not row:
                np.copyto(row, sample)
            return
        dst = row if self.fmt.channels_last else row.transpose(1, 2, 0)   # an H x W x 3 view of the row
        if self.fmt.table is None:
            np.copyto(dst, sample)
            return
        import cv2
        if self.fmt.dtype == "float32" and self.fmt.channels_last:
            if cv2.LUT(sample, self.fmt.table, dst=dst) is not dst:
                raise RuntimeError("cv2.LUT did not write into the batch")
            return
        cv2.LUT(sample, self.fmt.table, dst=self._converted)
        np.copyto(dst, self._converted, casting="unsafe")
