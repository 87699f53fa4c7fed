"""What a pack did: skipped files with their reasons, the PackReport, the error report file."""
from __future__ import annotations

import csv
import os
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from feedline.dataset import scan


class SkipReason(str, Enum):
    """Why an input file (or folder link) was not packed; the value is what the report says."""

    EMPTY = "empty"                  # zero bytes
    UNREADABLE = "unreadable"        # permissions, a broken symlink, an I/O error
    NOT_AN_IMAGE = "not-an-image"    # no known image signature
    TRUNCATED = "truncated"          # ends early (a JPEG without its EOI marker)
    CORRUPT = "corrupt"              # a known format that its decoder rejects
    TOO_LARGE = "too-large"          # more pixels than max_pixels (decompression bombs)
    UNSUPPORTED = "unsupported"      # valid, but no installed decoder reads it (e.g. 12-bit)
    SYMLINK_LOOP = scan.SYMLINK_LOOP        # a folder link to a folder above it: not followed
    SYMLINK_REPEAT = scan.SYMLINK_REPEAT    # a folder link to a folder packed anyway: not followed
    NOT_IN_LABELS = scan.NOT_IN_LABELS      # in the folder, not in the labels CSV
    NOT_IN_JSONL = scan.NOT_IN_JSONL        # in the folder, not in the JSON Lines labels file
    MISSING = scan.MISSING                  # in the labels CSV, not in the folder
    NO_CLASS = scan.NO_CLASS                # an image beside the class folders


class Skip(NamedTuple):
    path: str      # relative to SRC
    reason: SkipReason
    detail: str

    def row(self) -> list[str]:
        return [self.path, self.reason.value, self.detail]

    @classmethod
    def from_row(cls, row) -> "Skip":
        return cls(row[0], SkipReason(row[1]), row[2])

    @classmethod
    def of(cls, problem: scan.Unscanned) -> "Skip":
        return cls(problem.path, SkipReason(problem.reason), problem.detail)


@dataclass
class PackReport:
    """The outcome of a pack. Every scanned file is either packed or skipped."""

    out: str
    format: str
    found: int
    packed: int
    converted: int                 # packed records re-encoded (non-JPEG, CMYK, rotated, shrunk, ...)
    jpeg_warnings: int = 0         # packed JPEGs whose decode check met a benign libjpeg warning
    skipped: list[Skip] = field(default_factory=list)
    bytes_in: int = 0              # source bytes of the packed files
    bytes_out: int = 0             # encoded image bytes stored
    seconds: float = 0.0           # wall time of this run
    resumed_from: int = 0          # files already consumed by an interrupted run
    error_report: str | None = None
    shards: list["PackReport"] = field(default_factory=list)   # a sharded pack: one report per shard
    already_complete: bool = False  # --resume found OUT complete, from the same input and options
    boxes_clipped: int = 0         # boxes partly outside their image, clipped to it

    @property
    def skipped_by_reason(self) -> dict[str, int]:
        return dict(sorted(Counter(s.reason.value for s in self.skipped).items()))

    def summary_lines(self) -> list[str]:
        """A few lines for people; the CLI prints them."""
        if self.shards:
            return self._sharded_summary()
        if self.already_complete:
            return [f"{self.out} is already complete: {self.packed} records from the same input and options "
                    f"({len(self.skipped)} skipped); nothing to do"]
        mib = self.bytes_out / 2**20
        rate = self.found - self.resumed_from
        speed = (f"{rate / self.seconds:.0f} files/s, {self.bytes_in / 2**20 / self.seconds:.1f} MiB/s"
                 if self.seconds > 0 else "")
        lines = [f"packed {self.packed} of {self.found} files into {self.out} "
                 f"({self.format}, {mib:.1f} MiB) in {self.seconds:.2f} s" + (f" ({speed})" if speed else "")]
        if self.resumed_from:
            lines.append(f"  resumed after {self.resumed_from} files packed by an earlier run")
        lines.append(f"  converted to JPEG: {self.converted}")
        if self.boxes_clipped:
            lines.append(f"  boxes partly outside their image, clipped to it: {self.boxes_clipped}")
        if self.jpeg_warnings:
            lines.append(f"  packed with a harmless libjpeg warning (extraneous bytes, a bad ICC or EXIF "
                         f"segment; the image decodes to the end): {self.jpeg_warnings}")
        if self.skipped:
            reasons = ", ".join(f"{k}: {v}" for k, v in self.skipped_by_reason.items())
            lines.append(f"  skipped: {len(self.skipped)} ({reasons})"
                         + (f"; listed in {self.error_report}" if self.error_report else ""))
        else:
            lines.append("  skipped: 0")
        lines.append(f"  packed + skipped = found: {self.packed} + {len(self.skipped)} = {self.found}")
        return lines


    def _sharded_summary(self) -> list[str]:
        lines = [f"packed {self.packed} of {self.found} files into {len(self.shards)} shard(s) "
                 f"({self.format}, {self.bytes_out / 2**20:.1f} MiB) in {self.seconds:.2f} s; {self.out}"]
        for shard in self.shards:
            skipped = f", {len(shard.skipped)} skipped (listed in {shard.error_report})" if shard.skipped else ""
            resumed = "" if not shard.resumed_from else f", resumed after {shard.resumed_from} files"
            lines.append(f"  {os.path.basename(shard.out)}: {shard.packed} records{skipped}{resumed}")
        lines.append(f"  packed + skipped = found: {self.packed} + {len(self.skipped)} = {self.found}")
        return lines


def error_report_path(out: str) -> str:
    return out + ".errors.csv"


def write_error_report(out: str, skipped: list[Skip]) -> str | None:
    """Write OUT.errors.csv (path, reason, detail) atomically; remove a stale one when
    nothing was skipped. Returns its path, or None."""
    path = error_report_path(out)
    if not skipped:
        if os.path.exists(path):
            os.remove(path)
        return None
    tmp = path + ".partial"
    with open(tmp, "w", newline="", encoding="utf-8", errors="backslashreplace") as fh:
        writer = csv.writer(fh)
        writer.writerow(["path", "reason", "detail"])
        writer.writerows(s.row() for s in skipped)
    os.replace(tmp, path)
    return path


def read_error_report(path: str) -> list[Skip]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    return [Skip.from_row(r) for r in rows[1:]]


def nothing_packed(root: str, found: int, skipped: list[Skip]) -> str:
    """The message of a pack that packed none of the ``found`` files under ``root``."""
    counts: dict[str, int] = {}
    for s in skipped:
        counts[s.reason.value] = counts.get(s.reason.value, 0) + 1
    reasons = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    first = skipped[0] if skipped else None
    where = f"; first: {first.path}: {first.reason.value}: {first.detail}" if first else ""
    return f"{root}: none of the {found} image files could be packed ({reasons}){where}; nothing written"
