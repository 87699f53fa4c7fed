"""The ledger of bad records: one for every batch source, so a damaged data set reads the
same whichever source decodes it.

A record is bad when its bytes cannot be read, fail their checksum, or do not decode.
Each entry says where it happened (epoch, batch, position), which record (index, source
path), why (one of REASONS, plus the library's own words), and what was delivered in its
place (the substitute's index, or None when the error was raised).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from .errors import ChecksumError, StoreError

CHECKSUM = "checksum mismatch"
UNREADABLE = "unreadable"
UNDECODABLE = "cannot decode"
REASONS = (CHECKSUM, UNREADABLE, UNDECODABLE)


def reason_of(exc: BaseException) -> str:
    """The ledger's reason for an exception raised while reading or decoding a record."""
    if isinstance(exc, ChecksumError):
        return CHECKSUM
    if isinstance(exc, StoreError):
        return UNREADABLE
    return UNDECODABLE


@dataclass(frozen=True)
class BadRecord:
    epoch: int
    batch: int            # batch number in this rank's epoch
    position: int         # position in the batch
    index: int            # the bad record
    path: str
    reason: str           # one of REASONS
    detail: str           # the library's message
    substitute: int | None  # the record delivered in its place; None when the error was raised

    def __str__(self) -> str:
        instead = f", replaced by record {self.substitute}" if self.substitute is not None else ""
        return f"record {self.index} ({self.path}): {self.reason}{instead}"


class BadRecordLedger:
    """Thread-safe. One entry per (epoch, batch, position), the latest kept: a source that
    redoes a batch (DALI after a failure, or a substitute that turned out bad too) reports
    what it finally delivered, once."""

    def __init__(self):
        self._lock = threading.Lock()
        self._entries: dict[tuple[int, int, int], BadRecord] = {}

    def add(self, record: BadRecord) -> None:
        with self._lock:
            self._entries[(record.epoch, record.batch, record.position)] = record

    def records(self) -> list[BadRecord]:
        """Every entry, in the order of the epoch."""
        with self._lock:
            return [self._entries[k] for k in sorted(self._entries)]

    @property
    def substituted(self) -> int:
        with self._lock:
            return sum(r.substitute is not None for r in self._entries.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def summary(self, filename: str, shown: int = 5) -> str:
        """One line for the log: how many, why, and the first few."""
        records = self.records()
        counts: dict[str, int] = {}
        for r in records:
            counts[r.reason] = counts.get(r.reason, 0) + 1
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items()))
        first = "; ".join(str(r) for r in records[:shown])
        more = f"; and {len(records) - shown} more" if len(records) > shown else ""
        epoch = records[0].epoch if records else "?"
        return (f"{filename}: epoch {epoch}: {len(records)} bad record(s) ({why}): {first}{more}. "
                "Check the file with `feedline verify`; loader.stats.bad_records lists them all")
