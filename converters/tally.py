"""What a pack has committed so far, chunk by chunk (the journal's entries added up): the
columns of the data set, its masks' facts and the files skipped."""
from __future__ import annotations

from dataclasses import dataclass, field

from feedline.fields.mask import STORED_CODEC
from feedline.dataset.format import checksum
from feedline.dataset.scan import ScanResult

from .journal import JournalEntry
from .report import Skip
from .writer_base import Writer


@dataclass
class Tally:
    """Everything committed so far: the columns of the data set and the skipped files."""

    labels: list[int] = field(default_factory=list)
    sizes: list[list[int]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    checksums: list[int] = field(default_factory=list)
    oriented: list[list[int]] = field(default_factory=list)   # (record, EXIF orientation applied), where not 1
    mask_lengths: list[int] = field(default_factory=list)
    mask_checksums: list[int] = field(default_factory=list)
    mask_values: set[int] = field(default_factory=set)
    mask_bits: int = 8
    skipped: list[Skip] = field(default_factory=list)
    converted: int = 0
    source_bytes: int = 0
    jpeg_warnings: int = 0
    consumed: int = 0             # scanned files consumed by the committed chunks
    chunks: int = 0

    def add(self, entry: JournalEntry) -> None:
        self.labels += entry.labels
        self.sizes += entry.sizes
        self.paths += entry.paths
        self.lengths += entry.lengths
        self.checksums += entry.checksums
        self.oriented += entry.oriented
        self.mask_lengths += entry.mask_lengths
        self.mask_checksums += entry.mask_checksums
        self.mask_values.update(entry.mask_values)
        self.mask_bits = max(self.mask_bits, entry.mask_bits)
        self.skipped += entry.skips()
        self.converted += entry.converted
        self.jpeg_warnings += entry.jpeg_warnings
        self.source_bytes += entry.source_bytes
        self.consumed = entry.consumed
        self.chunks = entry.chunk + 1

    def packed_fields(self, scan: ScanResult) -> dict:
        """The fields as stored: masks with the codec they are stored in and what they hold."""
        if scan.masks is None:
            return scan.fields
        return {**scan.fields, "mask": {"codec": STORED_CODEC, "bits": self.mask_bits,
                                        "values": sorted(self.mask_values)}}


def add_mask(writer: Writer, entry: JournalEntry, mask) -> None:
    """Record ``entry.first_record + len(entry.labels)``'s mask (masks.PackedMask), after its image."""
    writer.add_mask(entry.first_record + len(entry.labels), mask.data)
    entry.mask_lengths.append(len(mask.data))
    entry.mask_checksums.append(checksum(mask.data))
    entry.mask_values = sorted(set(entry.mask_values).union(mask.values))
    entry.mask_bits = max(entry.mask_bits, mask.bits)
