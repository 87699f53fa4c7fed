"""What checking one input file gives: the Record to store, or the Conversion to run;
and the target columns of the records packed.

Shared by the cheap header check (`normalize`) and the slow re-encode (`reencode`),
so that neither imports the other's libraries: checking a JPEG stored as it is needs
no Pillow, OpenCV or numpy. Named tuples, not dataclasses: one of each is made per
file, and a tuple is made (and its class defined) several times faster.
"""
from __future__ import annotations

from typing import NamedTuple

from feedline.scan import ScanResult

from .options import PackOptions
from .report import Skip, SkipReason


class Record(NamedTuple):
    data: bytes
    height: int                 # of the stored image
    width: int
    converted: str | None       # why it was re-encoded; None when stored byte for byte
    source_bytes: int
    warning: str | None = None  # a benign libjpeg warning met by the decode check (jpeg_warnings)


class Conversion(NamedTuple):
    """A file that must be decoded and re-encoded: the slow case, run on the thread pool."""

    rel: str
    data: bytes
    why: str
    bits: int | None = None     # sample precision of a JPEG
    exotic: bool = False        # a JPEG process decoders may lack (12-bit, lossless, arithmetic)


def too_large(rel: str, width: int, height: int, options: PackOptions) -> Skip:
    return Skip(rel, SkipReason.TOO_LARGE,
                f"{width}x{height} = {width * height} pixels > max_pixels {options.max_pixels}")


def target_column_bytes(scan: ScanResult, paths: list[str], sizes: list[list[int]]) -> tuple[dict[str, bytes], int]:
    """The stored bytes of the fields beyond label (`feedline.fields`) of the records packed,
    ``paths`` in record order, fitted to their images (``sizes``: boxes partly outside are
    clipped), and how many values were fitted; taken from the scan at the end, so a resumed
    pack needs no targets in its journal."""
    if scan.targets is None or not scan.targets.fields:
        return {}, 0
    place = {p: i for i, p in enumerate(scan.paths)}
    fitted, changed = scan.targets.take([place[p] for p in paths]).fitted(sizes)
    return fitted.to_bytes(), changed


def target_problem(scan: ScanResult, indices: list[int], sizes: list[list[int]]) -> str | None:
    """The first target of the scanned files ``indices`` that its image refuses (``sizes``: the
    stored (height, width) of each), by the rule ``feedline verify`` applies (a box wholly
    outside its image), as a message naming the labels file, its row and the file; None if none."""
    if scan.targets is None or not scan.targets.fields or not indices:
        return None
    problems = scan.targets.take(indices).problems(sizes)
    if not problems:
        return None
    k, text = problems[0]
    rel = scan.paths[indices[k]]
    return (f"{scan.labels_file}: {scan.rows.get(rel, 'the row')} ({rel}): {text}: correct it in the labels file "
            f"(coordinates in the pixels of the image as it is stored) or remove it"
            + (f"; {len(problems) - 1} more in this chunk" if len(problems) > 1 else ""))
