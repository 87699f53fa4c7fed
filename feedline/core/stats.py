"""Loader statistics: throughput, consumer wait, time per stage, and the bad-record ledger."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from .ledger import BadRecord, BadRecordLedger


@dataclass
class LoaderStats:
    """Counters of the current iteration. Stage times are summed over decode threads, so
    read_s + decode_s can exceed elapsed_s; wait_s is the consumer's time inside the loader
    (blocked on the source, plus what finishing a batch costs the consumer's thread)."""

    images: int = 0
    batches: int = 0
    wait_s: float = 0.0     # consumer time inside next(loader)
    read_s: float = 0.0     # store reads (and checksums), summed over threads
    decode_s: float = 0.0   # decode + crop + resize + flip, summed over threads
    copy_s: float = 0.0     # normalization on the host, or the host-to-device copy's enqueue time
    started: float = field(default_factory=time.perf_counter)
    ledger: BadRecordLedger = field(default_factory=BadRecordLedger, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **amounts: float) -> None:
        with self._lock:
            for name, value in amounts.items():
                setattr(self, name, getattr(self, name) + value)

    @property
    def bad_records(self) -> list[BadRecord]:
        """The records of this iteration that could not be read or decoded, in epoch order."""
        return self.ledger.records()

    @property
    def substituted(self) -> int:
        return self.ledger.substituted

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    @property
    def images_per_s(self) -> float:
        return self.images / max(self.elapsed_s, 1e-9)

    @property
    def wait_fraction(self) -> float:
        return self.wait_s / max(self.elapsed_s, 1e-9)

    def as_dict(self) -> dict:
        return {"images": self.images, "batches": self.batches, "substituted": self.substituted,
                "wait_s": self.wait_s, "read_s": self.read_s, "decode_s": self.decode_s,
                "copy_s": self.copy_s, "elapsed_s": self.elapsed_s, "images_per_s": self.images_per_s,
                "wait_fraction": self.wait_fraction,
                "bad_records": [{"index": r.index, "path": r.path, "reason": r.reason,
                                 "substitute": r.substitute} for r in self.bad_records]}

    def __str__(self) -> str:
        return (f"{self.images_per_s:,.0f} images/s, waited {self.wait_fraction:.1%} of {self.elapsed_s:.1f} s; "
                f"per image: read {1e3 * self.read_s / max(self.images, 1):.2f} ms, "
                f"decode {1e3 * self.decode_s / max(self.images, 1):.2f} ms (thread time); "
                f"bad records {len(self.ledger)}, substituted {self.substituted}")
