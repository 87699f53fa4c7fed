"""How many decode threads: one per core this process may use, or DataLoader's ``num_workers``
capped at that (more threads than cores only add switching)."""
from __future__ import annotations

import os
import warnings


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


_warned_workers: set[tuple[int, int]] = set()  # (asked, usable): each said once per process


def choose_threads(num_threads, num_workers) -> int:
    """Decode threads: ``num_threads``, DataLoader's ``num_workers`` when threads are "auto"
    (at most one per usable core: more threads than cores only add switching), else one per
    usable core."""
    if num_threads != "auto":
        return num_threads
    if num_workers is None:
        return usable_cores()
    asked, usable = max(1, int(num_workers)), usable_cores()
    if asked <= usable:
        return asked
    if (asked, usable) not in _warned_workers:
        _warned_workers.add((asked, usable))
        warnings.warn(f"num_workers={asked} but this process may use {usable} cores (os.sched_getaffinity): "
                      f"using {usable} decode threads; pass num_threads={asked} to run that many anyway",
                      stacklevel=3)
    return usable
