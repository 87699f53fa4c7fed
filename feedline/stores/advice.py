"""Read-ahead advice: ask the kernel to read byte ranges of a store's files now, in large
sequential requests, so that the reads that follow find them in the page cache.

Stores read through memory maps advised MADV_RANDOM (the right default for shuffled
reads): a cold record then costs one synchronous page fault per 4 KiB page. A hint
(``posix_fadvise(WILLNEED)``) turns a run of neighbouring records into a few large
asynchronous reads instead. Hints change speed, never data: a failed hint is ignored.

Linux caps one WILLNEED call at the device's read-ahead size (``read_ahead_kb``, 128 KiB
by default, of the backing device's bdi), silently dropping the rest of the range, so
ranges are advised in pieces of that size.
"""
from __future__ import annotations

import logging
import os
from typing import Iterable, Sequence

import numpy as np

log = logging.getLogger(__name__)

MERGE_GAP = 64 << 10          # neighbours closer than this are read in one request
_MIN_PIECE = 128 << 10        # the kernel's default read-ahead
_MAX_PIECE = 8 << 20          # bounds the time one call spends submitting requests
_pieces: dict[int, int] = {}  # st_dev -> bytes per WILLNEED call

Range = tuple[str, int, int]  # (file, offset, length)


def merged_ranges(path: str, offsets: np.ndarray, lengths: np.ndarray, gap: int = MERGE_GAP) -> list[Range]:
    """The byte ranges ``[offset, offset + length)`` of one file in file order, those less
    than ``gap`` bytes apart joined (reading a small gap costs less than another request)."""
    if len(offsets) == 0:
        return []
    order = np.argsort(offsets, kind="stable")
    starts = np.asarray(offsets, dtype=np.int64)[order]
    ends = starts + np.asarray(lengths, dtype=np.int64)[order]
    reach = np.maximum.accumulate(ends)
    new_run = np.ones(len(starts), dtype=bool)
    new_run[1:] = starts[1:] > reach[:-1] + gap
    firsts = np.flatnonzero(new_run)
    lasts = np.append(firsts[1:], len(starts)) - 1
    return [(path, int(starts[a]), int(reach[b] - starts[a])) for a, b in zip(firsts, lasts)]


def will_need(ranges: Iterable[Range]) -> int:
    """Advise the kernel to read ``ranges`` (from `merged_ranges`) now, without waiting
    for them; returns the bytes advised. Files that cannot be opened are skipped."""
    advised = 0
    by_file: dict[str, list[tuple[int, int]]] = {}
    for path, offset, length in ranges:
        by_file.setdefault(path, []).append((offset, length))
    for path, spans in by_file.items():
        advised += _advise_file(path, spans)
    return advised


def _advise_file(path: str, spans: Sequence[tuple[int, int]]) -> int:
    if not hasattr(os, "posix_fadvise"):
        return 0
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        log.debug("%s: no read-ahead hint (%s)", path, exc)
        return 0
    advised = 0
    try:
        piece = _piece_bytes(fd)
        for offset, length in spans:
            for start in range(offset, offset + length, piece):
                os.posix_fadvise(fd, start, min(piece, offset + length - start), os.POSIX_FADV_WILLNEED)
            advised += length
    except OSError as exc:
        log.debug("%s: read-ahead hint failed (%s)", path, exc)
    finally:
        os.close(fd)
    return advised


def _piece_bytes(fd: int) -> int:
    """The largest WILLNEED the kernel honours whole for this file: its device's read-ahead."""
    dev = os.fstat(fd).st_dev
    if dev not in _pieces:   # no lock (a forked child may inherit one held): two threads find the same
        _pieces[dev] = _device_read_ahead(dev)
    return _pieces[dev]


def _device_read_ahead(dev: int) -> int:
    """read_ahead_kb of the device's bdi (network file systems have one too), or of the
    disk a partition lies on; the kernel's default when neither says."""
    name = f"{os.major(dev)}:{os.minor(dev)}"
    for where in (f"/sys/class/bdi/{name}/read_ahead_kb", f"/sys/dev/block/{name}/queue/read_ahead_kb",
                  f"/sys/dev/block/{name}/../queue/read_ahead_kb"):
        try:
            with open(where) as fh:
                return min(max(int(fh.read().strip()) << 10, _MIN_PIECE), _MAX_PIECE)
        except (OSError, ValueError):
            continue
    return _MIN_PIECE

