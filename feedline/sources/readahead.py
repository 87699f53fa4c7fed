"""Read-ahead for page-aware epochs: tell the store, ahead of the decode threads, which
runs of neighbouring records the next stretch of the order reads, so that a cold store
is read in a few large requests instead of one page fault per 4 KiB.

Quasi-random order (`feedline.planning.order.quasi_random_order`) visits the data set one window
of blocks at a time, each block a run of records adjacent on disk, the records of a
window shuffled together: every block of a window is needed from the window's first
batches on. So the hints run one window ahead: as soon as a block is due within the next
window's worth of samples, its records (those this rank visits) are advised, in the
order the epoch first touches them. The page cache then holds at most about two
windows of hinted data. Sequential order is advised the same way (a window of blocks
ahead); random order is left to the page faults: its neighbours are not read together.

Hints are advice: they change how fast records are read, never which records or what
bytes, so (seed, epoch)-determinism and exact resume are untouched. A hint that fails
(a file gone, a damaged index) stops the hints and is logged; the read itself reports.
"""
from __future__ import annotations

import logging
import threading
from typing import Iterator

import numpy as np

from ..core.choices import Order
from ..planning.plan import BatchPlan, EpochPlan
from ..stores.advice import will_need

log = logging.getLogger(__name__)

BLOCK_BYTES = 2 << 20   # one request: large enough that a disk's or network's latency is amortized
WINDOW_BLOCKS = 256     # blocks shuffled together: how many parts of the file a batch mixes
_CHUNK = 4096           # records placed, then advised, at a time


def page_aware_sizes(mean_record_bytes: float, block_bytes: int = BLOCK_BYTES,
                     window_blocks: int = WINDOW_BLOCKS) -> tuple[int, int]:
    """(block, window) for quasi-random order over records of ``mean_record_bytes``.

    A block of about 2 MiB costs one request: an SSD's ~0.1 ms or a network file system's
    ~1 ms latency is a few percent of reading it. A window of 256 blocks (about 512 MiB,
    read ahead once more while it is consumed: ~1 GiB of page cache) draws each batch
    from 256 places in the file: in a store packed class by class, up to 256 classes.
    Smaller blocks mix better and read worse; the window bounds the memory."""
    if mean_record_bytes <= 0:
        raise ValueError(f"mean record size must be positive, got {mean_record_bytes}")
    return max(1, round(block_bytes / mean_record_bytes)), window_blocks


class Schedule:
    """The hints of one epoch on one rank: runs of records ``first .. stop - 1`` (neighbours
    on disk, all visited by this rank from the start position on), each with ``due``, the
    position in the rank's remaining samples where its block is first read; sorted by due."""

    def __init__(self, samples: np.ndarray, block: int):
        if len(samples) == 0:
            self.due = self.first = self.stop = np.zeros(0, dtype=np.int64)
            return
        blocks = samples // block
        unique_blocks, first_seen = np.unique(blocks, return_index=True)
        by_place = np.lexsort((samples, blocks))          # by block, then by record
        records, owners = samples[by_place], blocks[by_place]
        starts = np.ones(len(records), dtype=bool)       # a run ends at a block's end or a gap
        starts[1:] = (owners[1:] != owners[:-1]) | (records[1:] != records[:-1] + 1)
        heads = np.flatnonzero(starts)
        tails = np.append(heads[1:], len(records)) - 1
        due = first_seen[np.searchsorted(unique_blocks, owners[heads])]
        order = np.lexsort((records[heads], due))
        self.due = due[order]
        self.first = records[heads][order]
        self.stop = records[tails][order] + 1

    def __len__(self) -> int:
        return len(self.due)

    def until(self, position: int) -> int:
        """How many runs are due before ``position``."""
        return int(np.searchsorted(self.due, position, side="left"))


class ReadAhead:
    """Advises ``store`` of the runs an epoch will read, one window ahead of the batches
    planned so far. Owns one thread: started here, stopped and joined by ``close()``.

    Concurrency invariant: one Condition guards ``_planned`` (samples of the epoch planned
    so far, set by ``follow`` in whichever thread draws the plans) and ``_closed``; the
    hint thread waits on it and calls the store with the lock released."""

    def __init__(self, store, epoch: EpochPlan, start: int, samples: np.ndarray | None = None):
        """``samples``: ``epoch.samples(len(store))`` when the caller has it (computed once
        per epoch, for the plans too); computed on the hint thread otherwise."""
        self._store, self._epoch, self._start, self._samples = store, epoch, start, samples
        self._ahead = max(epoch.batch_size, epoch.block * epoch.window // max(epoch.world_size, 1))
        self._cond = threading.Condition()
        self._planned = 0
        self._closed = False
        self.advised_bytes = 0
        self._thread = threading.Thread(target=self._run, name="feedline-readahead", daemon=True)
        self._thread.start()

    def follow(self, plans: Iterator[BatchPlan]) -> Iterator[BatchPlan]:
        """``plans`` unchanged; each one drawn moves the read-ahead on."""
        for plan in plans:
            with self._cond:
                self._planned = (plan.number - self._start) * self._epoch.batch_size + len(plan)
                self._cond.notify()
            yield plan

    def _run(self) -> None:
        store, epoch = self._store, self._epoch
        try:
            samples = self._samples if self._samples is not None else epoch.samples(len(store))
            samples = samples[self._start * epoch.batch_size:]
            schedule = Schedule(samples, epoch.block)
            done = 0
            while done < len(schedule):
                with self._cond:
                    while not self._closed and schedule.due[done] >= self._planned + self._ahead:
                        self._cond.wait()
                    if self._closed:
                        return
                    due = schedule.until(self._planned + self._ahead)
                while done < due and not self._closed:
                    done = self._advise(schedule, done, due)
        except Exception as exc:  # advice only: the reads that follow report real trouble
            log.warning("%s: read-ahead stopped (%s: %s); reading on without it",
                        getattr(store, "filename", store), type(exc).__name__, exc)

    def _advise(self, schedule: Schedule, done: int, due: int) -> int:
        """Advise runs ``done ..`` up to ``due`` (at most _CHUNK records); returns where it
        stopped. Every range is found before any is advised: finding them may read index
        pages (LMDB's B-tree), which would otherwise queue behind the advised reads."""
        ranges, records = [], 0
        while done < due and records < _CHUNK:
            first, stop = int(schedule.first[done]), int(schedule.stop[done])
            ranges += self._store.byte_ranges(first, stop)
            records += stop - first
            done += 1
        self.advised_bytes += will_need(ranges)
        return done

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> "ReadAhead":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class NoReadAhead:
    """Orders whose reads are scattered (random): nothing to advise."""

    advised_bytes = 0

    def follow(self, plans: Iterator[BatchPlan]) -> Iterator[BatchPlan]:
        return plans

    def close(self) -> None:
        pass

    def __enter__(self) -> "NoReadAhead":
        return self

    def __exit__(self, *exc) -> None:
        pass


def read_ahead(store, epoch: EpochPlan, start: int, samples: np.ndarray | None = None) -> ReadAhead | NoReadAhead:
    """The read-ahead for ``epoch`` from batch ``start`` on: hints for quasi-random and
    sequential orders over stores that can take them, nothing otherwise. ``samples`` as
    for ReadAhead."""
    if epoch.order is Order.RANDOM or len(store) == 0 or not store.byte_ranges(0, 1):
        return NoReadAhead()  # scattered reads, or a store that cannot say where records lie (folders)
    return ReadAhead(store, epoch, start, samples)
