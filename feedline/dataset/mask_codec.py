"""How a segmentation mask is stored: single-channel class indices (uint8, or uint16 for
16-bit masks), H x W, in bands of rows each compressed with deflate ("deflate-rows").

Why not the PNG as given: a crop of the mask is all a sample needs, and a band decodes alone,
so a crop inflates only the bands its rows cross; and zlib's inflate without PNG's row filters
decodes several times faster than OpenCV's PNG decoder, in fewer bytes than PNG at its
strongest setting (`bench/mask_codec.py` measures both on photo-derived masks).

One stored mask::

    b"FLMK"  u8 version (1)  u8 bytes per value (1, 2)  u16 rows per band
    u32 height  u32 width  u32 end of each band's stream (from the first stream)
    the bands' deflate streams, top to bottom; values little endian

A stored mask carries a checksum in the store (read_mask_checked); a damaged or hostile one
that passes it still cannot make a decode write past its rows: each band inflates to exactly
its size or is an error.
"""
from __future__ import annotations

import struct
import zlib

import numpy as np

from ..core.errors import FeedlineError

MAGIC = b"FLMK"
VERSION = 1
BAND_ROWS = 32
LEVEL = 9
_HEAD = struct.Struct("<4sBBHII")
DTYPES = {1: np.dtype(np.uint8), 2: np.dtype("<u2")}


class MaskError(FeedlineError):
    """A mask that cannot be read as one: not single-channel class indices, damaged, or not
    the size of its image."""


def encode(mask: np.ndarray, band_rows: int = BAND_ROWS) -> bytes:
    """``mask`` (H x W, uint8 or uint16) as stored."""
    if mask.ndim != 2 or mask.dtype not in (np.uint8, np.uint16):
        raise MaskError(f"a mask is H x W uint8 or uint16 class indices, not {mask.dtype} of shape {mask.shape}")
    m = np.ascontiguousarray(mask, dtype=DTYPES[mask.dtype.itemsize])
    h, w = m.shape
    streams = [zlib.compress(m[r:r + band_rows].tobytes(), LEVEL) for r in range(0, h, band_rows)]
    ends = np.cumsum([len(s) for s in streams], dtype=np.uint64).astype("<u4")
    return b"".join([_HEAD.pack(MAGIC, VERSION, m.itemsize, band_rows, h, w), ends.tobytes(), *streams])


def shape_of(data) -> tuple[int, int, np.dtype]:
    """(height, width, dtype) of a stored mask, from its header."""
    view = memoryview(data)
    if len(view) < _HEAD.size:
        raise MaskError(f"a stored mask of {len(view)} bytes is shorter than its header: it is damaged")
    magic, version, itemsize, band_rows, h, w = _HEAD.unpack_from(view)
    if magic != MAGIC or version != VERSION or itemsize not in DTYPES or band_rows < 1:
        raise MaskError("not a stored mask of this feedline (its header does not read as one): it is damaged")
    return h, w, DTYPES[itemsize]


def decode(data, first: int = 0, stop: int | None = None) -> np.ndarray:
    """Rows ``first .. stop - 1`` (all by default) of a stored mask: H' x W, its own dtype.
    Only the bands those rows cross are inflated."""
    h, w, dtype = shape_of(data)
    stop = h if stop is None else stop
    if not 0 <= first <= stop <= h:
        raise ValueError(f"rows {first}..{stop - 1} are not within the mask's {h}")
    view = memoryview(data)
    band_rows = _HEAD.unpack_from(view)[3]
    bands = -(-h // band_rows)
    start = _HEAD.size + 4 * bands
    if len(view) < start:
        raise MaskError("a stored mask is cut short (its band table is incomplete): it is damaged")
    ends = np.frombuffer(view[_HEAD.size:start], dtype="<u4").astype(np.int64)
    if bands and (np.any(np.diff(ends) < 0) or ends[-1] != len(view) - start):
        raise MaskError("a stored mask's band table disagrees with its length: it is damaged")
    lo, hi = first // band_rows, -(-stop // band_rows)
    row_bytes = w * dtype.itemsize
    parts = []
    for b in range(lo, hi):
        begin = start + (int(ends[b - 1]) if b else 0)
        want = (min(h, (b + 1) * band_rows) - b * band_rows) * row_bytes
        inflate = zlib.decompressobj()
        try:
            part = inflate.decompress(view[begin:start + int(ends[b])], want)
        except zlib.error as exc:
            raise MaskError(f"band {b} of a stored mask does not inflate ({exc}): it is damaged") from None
        if len(part) != want:
            raise MaskError(f"band {b} of a stored mask inflates to {len(part)} bytes, not {want}: it is damaged")
        if not inflate.eof or inflate.unconsumed_tail:
            raise MaskError(f"band {b} of a stored mask inflates past its {want} bytes: it is damaged")
        parts.append(part)
    rows = np.frombuffer(b"".join(parts), dtype=dtype).reshape(-1, w)
    return rows[first - lo * band_rows:stop - lo * band_rows]


def read_png(data, where: str) -> np.ndarray:
    """A mask file's class indices (H x W, uint8 or uint16): a single-channel PNG, 8 or 16 bits
    (a palette PNG, as VOC's, gives its palette indices); MaskError naming ``where`` otherwise."""
    import io

    from PIL import Image
    try:
        with Image.open(io.BytesIO(bytes(data))) as im:
            im.load()
    except Exception as exc:   # noqa: BLE001 -- any failure on a user's file makes it unreadable
        raise MaskError(f"{where}: not an image Pillow can read ({exc}); a mask is a single-channel "
                        "8- or 16-bit PNG") from None
    if im.mode in ("P", "L", "1"):
        return np.asarray(im, dtype=np.uint8)
    if im.mode.startswith("I;16"):
        return np.asarray(im).astype("<u2")
    if im.mode == "I":
        values = np.asarray(im)
        if values.size and (int(values.min()) < 0 or int(values.max()) > 0xFFFF):
            raise MaskError(f"{where}: values {int(values.min())}..{int(values.max())}, beyond the 16 bits "
                            "a mask holds (class indices 0..65535)")
        return values.astype("<u2")
    raise MaskError(f"{where}: a {im.mode} image (colour or alpha), but a mask is one channel of class "
                    "indices: save it as a grayscale (mode L or I;16) or palette PNG, one value per class")


def values_of(mask: np.ndarray) -> np.ndarray:
    """The distinct values of a mask, sorted (bincount: fast for 8 and 16 bits)."""
    return np.flatnonzero(np.bincount(mask.reshape(-1), minlength=1))
