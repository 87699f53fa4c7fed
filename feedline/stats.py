"""Loader statistics: throughput, consumer wait, and time per stage."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, fields


@dataclass
class LoaderStats:
    """Counters for the current iteration. Stage times are summed over decode threads,
    so read_s + decode_s can exceed elapsed_s; wait_s is the consumer's blocked time."""

    images: int = 0
    batches: int = 0
    substituted: int = 0
    wait_s: float = 0.0     # consumer blocked waiting for a batch
    read_s: float = 0.0     # store.read, summed over threads
    decode_s: float = 0.0   # decode + crop + resize + flip, summed over threads
    copy_s: float = 0.0     # host-to-device copy and normalization (enqueue time on CUDA)
    started: float = field(default_factory=time.perf_counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **amounts: float) -> None:
        with self._lock:
            for name, value in amounts.items():
                setattr(self, name, getattr(self, name) + value)

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
        out = {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")
               and f.name != "started"}
        out.update(elapsed_s=self.elapsed_s, images_per_s=self.images_per_s, wait_fraction=self.wait_fraction)
        return out

    def __str__(self) -> str:
        return (f"{self.images_per_s:,.0f} images/s, waited {self.wait_fraction:.1%} of {self.elapsed_s:.1f} s; "
                f"per image: read {1e3 * self.read_s / max(self.images, 1):.2f} ms, "
                f"decode {1e3 * self.decode_s / max(self.images, 1):.2f} ms (thread time); "
                f"substituted {self.substituted}")
