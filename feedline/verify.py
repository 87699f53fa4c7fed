"""Check a data set end to end: every record decodes to the size its column states.

``verify`` backs ``feedline verify``. File-level checks (metadata count, columns,
stored keys) come first, then labels in one vectorized pass, then every record is
read and decoded on a pool of threads. Problems are collected, not raised, so one
run lists every bad record with its index and source path.
"""
from __future__ import annotations

import logging
import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

from .errors import FeedlineError, StoreError
from .stores import Store, open_dataset

if TYPE_CHECKING:
    from .decoders.base import Decoder

log = logging.getLogger(__name__)

CHUNK = 64  # records per task: enough to amortize the executor, small enough for a smooth progress bar


@dataclass(frozen=True)
class Problem:
    """One thing wrong: with a record's index and source path, or about the whole file (None)."""

    index: int | None
    path: str | None
    problem: str

    def __str__(self) -> str:
        if self.index is None:
            return f"file: {self.problem}"
        return f"record {self.index} ({self.path}): {self.problem}"


@dataclass
class VerifyResult:
    filename: str
    kind: str            # "lmdb", "hdf5", "folder", or "unknown" when the file would not open
    count: int           # records in the data set
    decoded: int         # records read and decoded (count, unless the file would not open)
    decoder: str
    jobs: int
    seconds: float
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        if self.ok:
            return (f"OK: {self.filename} ({self.kind}): {self.count:,} records decode with {self.decoder} "
                    f"to their stated sizes, labels in range ({self.seconds:.1f} s, {self.jobs} threads)")
        bad = len({p.index for p in self.problems if p.index is not None})
        whole = sum(p.index is None for p in self.problems)
        parts = [f"{bad:,} bad record(s) of {self.count:,}"] + ([f"{whole} file problem(s)"] if whole else [])
        return f"FAILED: {self.filename} ({self.kind}): {', '.join(parts)}"

    def to_dict(self) -> dict:
        return {"filename": self.filename, "kind": self.kind, "ok": self.ok, "count": self.count,
                "decoded": self.decoded, "decoder": self.decoder, "jobs": self.jobs,
                "seconds": self.seconds,
                "problems": [{"index": p.index, "path": p.path, "problem": p.problem} for p in self.problems]}


def default_jobs() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def verify(dataset: Store | str | os.PathLike, decoder: str | Decoder = "turbojpeg", jobs: int | None = None,
           on_progress: Callable[[int, int], None] | None = None) -> VerifyResult:
    """Verify a store, or the file or folder at a path (opened and closed here).

    ``on_progress(done, total)`` is called from the calling thread as records finish.
    ``decoder`` is a registered backend's name (used in its strict mode, if it has one)
    or a Decoder instance (used as it is).
    A file that exists but will not open is a failed result, not an exception; a
    missing path or decoder raises as usual.
    """
    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    dec = _strict_decoder(decoder) if isinstance(decoder, str) else decoder
    if isinstance(dataset, Store):
        return _verify(dataset, dec, jobs, on_progress)
    path = os.fspath(dataset)
    if not os.path.exists(path):
        raise StoreError(f"{path}: no such file or folder")
    start = time.perf_counter()
    try:
        store = open_dataset(path)
    except StoreError as exc:
        return VerifyResult(filename=path, kind="unknown", count=0, decoded=0, decoder=dec.name, jobs=jobs,
                            seconds=time.perf_counter() - start, problems=[Problem(None, None, str(exc))])
    with store:
        return _verify(store, dec, jobs, on_progress)


def _strict_decoder(name: str) -> Decoder:
    """The backend ``name``, in strict mode where it has one: a JPEG cut short is then an
    error, not a warning and a part-gray image."""
    from .decoders import get_decoder
    dec = get_decoder(name)
    if getattr(dec, "strict", None) is False:
        return get_decoder(dec.name, strict=True)
    if not getattr(dec, "strict", False):
        log.info("decoder %r has no strict mode: a JPEG cut short may pass as decoded", dec.name)
    return dec


def _verify(store: Store, dec: Decoder, jobs: int, on_progress) -> VerifyResult:
    start = time.perf_counter()
    n = len(store)
    problems = _file_problems(store)
    problems += _label_problems(store)
    problems += _decode_all(store, dec, jobs, on_progress)
    problems.sort(key=lambda p: (p.index is not None, p.index or 0))
    return VerifyResult(filename=store.filename, kind=store.kind, count=n, decoded=n, decoder=dec.name,
                        jobs=jobs, seconds=time.perf_counter() - start, problems=problems)


def _file_problems(store: Store) -> list[Problem]:
    problems = []
    count = store.meta.get("count")
    if count != len(store):
        problems.append(Problem(None, None, f"metadata counts {count} records, the columns hold {len(store)}"))
    problems += [Problem(None, None, text) for text in store.layout_problems()]
    return problems


def _label_problems(store: Store) -> list[Problem]:
    labels = np.asarray(store.labels)
    k = len(store.classes)
    bad = np.flatnonzero((labels < 0) | (labels >= k))
    return [Problem(int(i), store.path(int(i)), f"label {int(labels[i])} outside 0..{k - 1} ({k} classes)")
            for i in bad]


def _check_record(store: Store, dec: Decoder, index: int) -> str | None:
    """What is wrong with one record, or None."""
    try:
        data = store.read(index)
        expected = store.size(index)
    except FeedlineError as exc:
        return str(exc)
    try:
        image = dec.decode(data)
    except Exception as exc:  # noqa: BLE001 -- any failure of the backend is this record's problem, reported
        why = str(exc) if isinstance(exc, FeedlineError) else f"{type(exc).__name__}: {exc}"
        return f"does not decode with {dec.name}: {why}"
    shape = getattr(image, "shape", None)
    if shape is None or len(shape) != 3 or shape[2] != 3:
        return f"decoded to shape {shape}, expected H x W x 3"
    if (int(shape[0]), int(shape[1])) != expected:
        return f"decodes to {shape[0]}x{shape[1]} (HxW), the sizes column says {expected[0]}x{expected[1]}"
    return None


def _check_chunk(store: Store, dec: Decoder, start: int, stop: int) -> list[Problem]:
    problems = []
    for i in range(start, stop):
        text = _check_record(store, dec, i)
        if text is not None:
            problems.append(Problem(i, store.path(i), text))
    return problems


def _decode_all(store: Store, dec: Decoder, jobs: int, on_progress) -> list[Problem]:
    n = len(store)
    chunks = iter(range(0, n, CHUNK))
    problems: list[Problem] = []
    pending: dict[Future, int] = {}
    done_records = 0
    if on_progress is not None:
        on_progress(0, n)
    # At most a few chunks per thread in flight: memory stays flat however big the file.
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="feedline-verify") as pool:
        try:
            while True:
                for start in chunks:
                    stop = min(start + CHUNK, n)
                    pending[pool.submit(_check_chunk, store, dec, start, stop)] = stop - start
                    if len(pending) >= 4 * jobs:
                        break
                if not pending:
                    break
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    problems += future.result()
                    done_records += pending.pop(future)
                    if on_progress is not None:
                        on_progress(done_records, n)
        except BaseException:
            for future in pending:
                future.cancel()
            raise
    return problems
