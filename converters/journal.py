"""Resume bookkeeping: one journal entry per commit, written together with its images.

An entry says how many scanned files are consumed, the columns of the records it
commits and the files it skipped, so an interrupted pack continues exactly where
its last commit ended and produces the same data set as an uninterrupted one.
JSON, never pickle. LMDB keeps entries under ``format.journal_key``; HDF5 staging
keeps them as lines of a side file.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from feedline.core.errors import PackError
from feedline.dataset.scan import ScanResult

from .report import Skip

JOURNAL_VERSION = 2   # 2: checksums per record


def scan_digest(scan: ScanResult) -> str:
    """A digest of what was scanned (paths, labels, classes, and the values of any fields beyond
    label): resuming needs the same input. A label-only scan hashes as it always did, so the
    journals and input digests written before fields existed still match."""
    h = hashlib.sha256()
    h.update(json.dumps(scan.classes).encode())
    for path, label in zip(scan.paths, scan.labels):
        h.update(b"%d\t%s\n" % (label, path.encode("utf-8", "surrogateescape")))
    if scan.targets is not None and scan.targets.fields:
        h.update(json.dumps(scan.fields, sort_keys=True).encode())
        h.update(json.dumps(scan.class_lists, sort_keys=True).encode())
        for name, buf in scan.targets.to_bytes().items():
            h.update(b"\n%s %d\n" % (name.encode(), len(buf)))
            h.update(buf)
    if scan.masks is not None:
        h.update(b"\nmasks\n" + "\n".join(scan.masks).encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def differences(then: dict, now: dict) -> str:
    """The pack options that differ, as "quality: 95 then, 80 now, ..." (in name order)."""
    return ", ".join(f"{k}: {then.get(k)!r} then, {now.get(k)!r} now"
                     for k in sorted(set(then) | set(now)) if then.get(k) != now.get(k))


@dataclass
class JournalEntry:
    chunk: int                   # 0, 1, 2, ... in commit order
    consumed: int                # scanned files consumed, this chunk included
    first_record: int            # index of the chunk's first record
    options: dict                # PackOptions.output_options(format)
    digest: str                  # scan_digest of the input
    labels: list[int] = field(default_factory=list)
    sizes: list[list[int]] = field(default_factory=list)    # (height, width) per record
    paths: list[str] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)        # encoded bytes per record
    checksums: list[int] = field(default_factory=list)      # format.checksum per record
    converted: int = 0
    source_bytes: int = 0
    jpeg_warnings: int = 0       # records whose decode check met a benign libjpeg warning
    skipped: list[list[str]] = field(default_factory=list)  # (path, reason, detail)
    oriented: list[list[int]] = field(default_factory=list)  # (record, EXIF orientation applied), where not 1
    mask_lengths: list[int] = field(default_factory=list)    # stored bytes of each record's mask (masks only)
    mask_checksums: list[int] = field(default_factory=list)  # format.checksum of each stored mask
    mask_values: list[int] = field(default_factory=list)     # the distinct class indices of the chunk's masks
    mask_bits: int = 0                                       # the most bits of a mask of the chunk (8, 16)
    version: int = JOURNAL_VERSION

    def to_bytes(self) -> bytes:
        # vars(), not asdict(): the fields are plain JSON values, and asdict deep-copies them.
        return json.dumps(vars(self), separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, raw: bytes, where: str) -> "JournalEntry":
        try:
            entry = cls(**json.loads(raw))
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            raise PackError(f"{where}: the resume journal is damaged ({exc}); "
                            "start over without --resume") from None
        if entry.version != JOURNAL_VERSION:
            raise PackError(f"{where}: journal version {entry.version}, but this feedline resumes only "
                            f"version {JOURNAL_VERSION}; start over without --resume")
        return entry

    @property
    def records(self) -> int:
        return len(self.labels)

    def skips(self) -> list[Skip]:
        return [Skip.from_row(row) for row in self.skipped]


def check_entries(entries: list[JournalEntry], options: dict, digest: str, where: str) -> None:
    """Refuse to resume a pack made from other options or another input."""
    expected_record = 0
    for k, entry in enumerate(entries):
        if entry.chunk != k or entry.first_record != expected_record:
            raise PackError(f"{where}: the resume journal has a gap at chunk {k}; "
                            "start over without --resume")
        expected_record += entry.records
    if not entries:
        return
    last = entries[-1]
    if last.options != options:
        raise PackError(f"{where}: the interrupted pack used other options ({differences(last.options, options)}); "
                        "rerun with the same options, or start over with --overwrite and no --resume")
    if last.digest != digest:
        raise PackError(f"{where}: the source folder changed since the interrupted pack "
                        "(files or labels differ); start over without --resume")
