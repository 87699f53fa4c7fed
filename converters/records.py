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


def target_column_bytes(scan: ScanResult, paths: list[str]) -> dict[str, bytes]:
    """The stored bytes of the fields beyond label (`feedline.targets`) of the records packed,
    ``paths`` in record order; taken from the scan at the end, so a resumed pack needs no
    targets in its journal."""
    if scan.targets is None or not scan.targets.fields:
        return {}
    place = {p: i for i, p in enumerate(scan.paths)}
    return scan.targets.take([place[p] for p in paths]).to_bytes()
