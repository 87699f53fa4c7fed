"""The restart-marker grid: a crop of a grid JPEG as a small JPEG spliced from its bytes.

A grid JPEG is baseline (sequential Huffman, one interleaved scan) with a restart
interval of one MCU (DRI = 1): every MCU is coded on its own (DC predictions reset,
byte-aligned), and RST0..RST7 markers separate them. A crop's MCUs then make a valid
JPEG by themselves: the same tables, a SOF with the crop's MCU-aligned size, the
crop's intervals with their markers renumbered 0-7 from the start, EOI. Only that
JPEG is decoded, so the entropy data above and beside the crop is never read.

The intervals' byte offsets are found when a record is read, not stored: one
vectorized scan for FF D0-D7 over the entropy data (in entropy-coded data FF is
always followed by 00 or a marker, so the scan is exact), checked against the MCU
count and the 0-7 cycle. Every offset comes from the record itself and every slice
is bounded by it, so a damaged record is a DecodeError, never a read outside it.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..core.errors import DecodeError
from .base import Box

_SOF_SEQUENTIAL = (0xC0, 0xC1)          # baseline, extended sequential Huffman
_SOF_OTHER = set(range(0xC2, 0xD0)) - {0xC4, 0xC8, 0xCC}   # progressive, lossless, arithmetic
_DHT, _DRI, _SOS, _EOI = 0xC4, 0xDD, 0xDA, 0xD9


class GridLayout(NamedTuple):
    """Where things are in one grid JPEG, parsed from its bytes."""

    height: int
    width: int
    mcu_height: int
    mcu_width: int
    mcus_down: int
    mcus_across: int
    sof_at: int             # offset of the SOF marker (FF Cx)
    scan_at: int            # first byte of the entropy-coded data
    scan_end: int           # offset of the closing EOI
    markers: np.ndarray     # int64 offsets of the RST markers' FF bytes, one after every MCU but the last


def not_grid(why: str) -> DecodeError:
    return DecodeError(f"not a restart-grid JPEG (a bad record of a grid store): {why}; "
                       "`feedline verify` the store, or repack the source file")


def parse_grid(data) -> GridLayout:
    """The layout of ``data`` (bytes-like), a grid JPEG; DecodeError if it is not one."""
    try:
        return _parse(data)
    except IndexError:   # a segment shorter than its kind needs, at the very end of the record
        raise not_grid("its headers are cut short") from None


def _parse(data) -> GridLayout:
    buf = memoryview(data).cast("B")   # the headers, byte by byte: Python ints, no numpy scalars
    n = len(buf)
    if n < 4 or buf[0] != 0xFF or buf[1] != 0xD8:
        raise not_grid("no JPEG start-of-image marker")
    pos, sof, interval = 2, None, None
    while True:
        if pos + 4 > n:
            raise not_grid(f"the headers run past the end of the {n}-byte record")
        if buf[pos] != 0xFF:
            raise not_grid(f"no marker at byte {pos}")
        code = buf[pos + 1]
        if code == 0xFF:        # fill byte before a marker
            pos += 1
            continue
        length = buf[pos + 2] << 8 | buf[pos + 3]
        if length < 2 or pos + 2 + length > n:
            raise not_grid(f"marker FF{code:02X} at byte {pos} has a bad length {length}")
        if code in _SOF_SEQUENTIAL:
            sof = pos
        elif code in _SOF_OTHER:
            raise not_grid(f"SOF FF{code:02X} is not baseline/sequential Huffman")
        elif code == _DRI and length == 4:
            interval = buf[pos + 4] << 8 | buf[pos + 5]
        elif code == _SOS:
            scan_at = pos + 2 + length
            break
        pos += 2 + length
    if sof is None:
        raise not_grid("no baseline SOF before the scan")
    if interval != 1:
        raise not_grid(f"restart interval {interval} (a grid has 1: one MCU)")
    height, width, (mcu_h, mcu_w), ncomp = _frame(buf, sof)
    if buf[pos + 4] != ncomp:
        raise not_grid("the scan does not hold every component (a multi-scan JPEG)")
    if buf[n - 2] != 0xFF or buf[n - 1] != _EOI:
        raise not_grid("it does not end with an end-of-image marker")
    down, across = -(-height // mcu_h), -(-width // mcu_w)
    entropy = np.frombuffer(data, dtype=np.uint8)[scan_at:n - 2]
    ff = np.flatnonzero(entropy[:-1] == 0xFF)     # few: stuffed FF 00 pairs and the markers
    markers = ff[(entropy[ff + 1] & 0xF8) == 0xD0]
    if len(markers) != down * across - 1:
        raise not_grid(f"{len(markers)} restart markers for {down * across} MCUs")
    if len(markers) and (np.any((entropy[markers + 1] & 7) != (np.arange(len(markers)) & 7))
                         or np.any(np.diff(markers) < 3) or markers[0] < 1):
        raise not_grid("restart markers out of sequence, or an empty interval")
    return GridLayout(height, width, mcu_h, mcu_w, down, across, sof, scan_at, n - 2, markers + scan_at)


def _frame(buf: memoryview, sof: int) -> tuple[int, int, tuple[int, int], int]:
    """(height, width, (MCU height, MCU width), components) from the SOF at ``sof``."""
    length = buf[sof + 2] << 8 | buf[sof + 3]
    if length < 11:
        raise not_grid(f"a SOF segment of {length} bytes")
    height = buf[sof + 5] << 8 | buf[sof + 6]
    width = buf[sof + 7] << 8 | buf[sof + 8]
    ncomp = buf[sof + 9]
    if buf[sof + 4] != 8 or height == 0 or width == 0 or ncomp not in (1, 3) or length != 8 + 3 * ncomp:
        raise not_grid(f"an unusual frame ({buf[sof + 4]}-bit, {width}x{height}, {ncomp} components)")
    factors = buf[sof + 11:sof + 11 + 3 * ncomp:3].tolist()   # after each component id
    h, v = [f >> 4 for f in factors], [f & 15 for f in factors]
    if ncomp == 1:      # a one-component scan is not interleaved: its MCU is one 8x8 block
        return height, width, (8, 8), ncomp
    if min(h + v) < 1 or max(h + v) > 4:
        raise not_grid("bad sampling factors")
    return height, width, (8 * max(v), 8 * max(h)), ncomp


def mcu_span(layout: GridLayout, top: int, left: int, height: int, width: int) -> tuple[int, int, int, int]:
    """(first MCU row, end MCU row, first MCU column, end MCU column) covering the box."""
    if height <= 0 or width <= 0 or top < 0 or left < 0 or top + height > layout.height \
            or left + width > layout.width:
        raise DecodeError(f"crop {(top, left, height, width)} (top, left, height, width) is not inside the "
                          f"{layout.height}x{layout.width} image; does the record's size match its data?")
    return (top // layout.mcu_height, -(-(top + height) // layout.mcu_height),
            left // layout.mcu_width, -(-(left + width) // layout.mcu_width))


CONTEXT = 4   # pixels: a crop edge nearer its MCU's edge than this also takes the next MCU


def with_context(layout: GridLayout, box: Box, r0: int, r1: int, c0: int, c1: int):
    """The MCU rows and columns to splice for ``box``: its own, plus one more on each side
    where the box's edge lies within CONTEXT pixels of its MCU's edge (and the image goes on).

    A full decode computes those edge pixels from both MCUs: libjpeg's chroma upsampling
    interpolates across the MCU edge, and a reduced-scale crop's bilinear resize samples
    just outside the box. Spliced without the neighbour, the edge pixels would come from
    replicated chroma and borders (up to ~0.3 in normalized units on a few edge pixels); with
    it, they are the full decode's."""
    mh, mw = layout.mcu_height, layout.mcu_width
    if box.top - r0 * mh < CONTEXT:
        r0 = max(r0 - 1, 0)
    if r1 * mh - (box.top + box.height) < CONTEXT:
        r1 = min(r1 + 1, layout.mcus_down)
    if box.left - c0 * mw < CONTEXT:
        c0 = max(c0 - 1, 0)
    if c1 * mw - (box.left + box.width) < CONTEXT:
        c1 = min(c1 + 1, layout.mcus_across)
    return (r0, r1), (c0, c1)


def splice_crop(data, box, layout: GridLayout | None = None) -> tuple[bytes, Box, tuple[int, int]]:
    """(the JPEG of the MCUs under ``box``, ``box`` shifted into it, its (height, width)).

    ``box`` is (top, left, height, width) in grid JPEG ``data``; ``layout`` is data's
    (parse_grid), parsed here when not given. DecodeError when data is not a grid or the
    box is not inside it."""
    box = Box(*map(int, box))   # plans hold numpy ints
    layout = parse_grid(data) if layout is None else layout
    rows, cols = with_context(layout, box, *mcu_span(layout, *box))
    top, left, height, width = _block(layout, rows, cols)
    shifted = Box(box.top - top, box.left - left, box.height, box.width)
    return splice(data, layout, rows, cols), shifted, (height, width)


def _block(layout: GridLayout, rows: tuple[int, int], cols: tuple[int, int]) -> tuple[int, int, int, int]:
    """(top, left, height, width) in the source of MCU rows ``rows`` and columns ``cols``:
    the spliced JPEG's pixels (the last row and column cut at the image's edge)."""
    top, left = rows[0] * layout.mcu_height, cols[0] * layout.mcu_width
    return (top, left, min(rows[1] * layout.mcu_height, layout.height) - top,
            min(cols[1] * layout.mcu_width, layout.width) - left)


def splice(data, layout: GridLayout, rows: tuple[int, int], cols: tuple[int, int]) -> bytes:
    """The JPEG of MCU rows ``rows`` and columns ``cols`` (start, end) of grid JPEG ``data``.

    Its pixel (0, 0) is the source's (rows[0] * mcu_height, cols[0] * mcu_width)."""
    r0, r1 = rows
    c0, c1 = cols
    if not (0 <= r0 < r1 <= layout.mcus_down and 0 <= c0 < c1 <= layout.mcus_across):
        raise DecodeError(f"MCU rows {rows}, columns {cols} are outside the {layout.mcus_down}x"
                          f"{layout.mcus_across} MCU grid")
    if not len(layout.markers):
        return bytes(data)      # one MCU: the crop is the image
    view = memoryview(data)
    markers, across = layout.markers, layout.mcus_across
    _, _, height, width = _block(layout, rows, cols)
    sof = layout.sof_at
    parts = [view[:sof + 5], height.to_bytes(2, "big"), width.to_bytes(2, "big"), view[sof + 9:layout.scan_at]]
    # Row r's intervals k0..k1-1 lie together: from the start of k0 to the marker after k1-1.
    first = np.arange(r0, r1) * across + c0
    last = first + (c1 - c0 - 1)
    starts = np.where(first == 0, layout.scan_at, markers[first - 1] + 2)
    ends = np.where(last == len(markers), layout.scan_end, markers[np.minimum(last, len(markers) - 1)])
    # The markers inside each row come along; those between rows are added. All are renumbered.
    head = layout.scan_at   # the headers keep their length: only the SOF's size changes
    rst = bytearray(b"\xff\xd0")
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        if i:
            parts.append(rst)
        parts.append(view[s:e])
    parts.append(b"\xff\xd9")
    out = bytearray(b"".join(parts))
    _renumber(out, head, starts, ends, markers, first, c1 - c0)
    return bytes(out)


def _renumber(out: bytearray, head: int, starts: np.ndarray, ends: np.ndarray, markers: np.ndarray,
              first: np.ndarray, per_row: int) -> None:
    """Set the RST markers of spliced ``out`` to 0, 1, ..., 7, 0, ... in order."""
    lengths = ends - starts
    row_at = head + np.concatenate(([0], np.cumsum(lengths[:-1] + 2)))   # each row's first byte in out
    inside = markers[first[:, None] + np.arange(per_row - 1)[None, :]] if per_row > 1 \
        else np.empty((len(first), 0), np.int64)
    inside = inside - starts[:, None] + row_at[:, None]                  # the row's own markers, moved
    between = (row_at[1:] - 2)[:, None]                                  # the added ones
    at = np.concatenate((inside, np.vstack((between, np.zeros((1, 1), np.int64)))), axis=1).ravel()
    at = at[:-1]                                                         # no marker after the last row
    codes = np.frombuffer(out, dtype=np.uint8)
    codes[at + 1] = 0xD0 + (np.arange(len(at)) & 7)


GRID = "grid"   # pack_options["layout"] of a grid store


def is_grid_store(store) -> bool:
    """Whether ``store``'s records were packed with the restart-marker grid."""
    options = (getattr(store, "meta", None) or {}).get("pack_options") or {}
    return options.get("layout") == GRID
