"""Check a data set end to end: every record's bytes (and mask) match their checksum and
decode to the size its column states.

``verify`` backs ``feedline verify``. File-level checks (metadata count, columns,
stored keys) come first, then labels in one vectorized pass, then every record is
read on a pool of threads: its checksum compared (packed files of format version 2 on)
and, unless ``mode="checksums"``, decoded strictly (a libjpeg warning such as "corrupt
JPEG data" or "premature end" makes the record bad). Problems are collected, not
raised, so one run lists every bad record with its index and source path.
"""
from __future__ import annotations

import glob
import logging
import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..decoders import jpeg_warnings
from ..core.errors import FeedlineError, StoreError
from ..fields import per_pixel
from .format import checksum
from ..stores import Store, open_dataset
from .urls import check_url, url_scheme

if TYPE_CHECKING:
    from ..decoders.base import Decoder

log = logging.getLogger(__name__)

CHUNK = 64  # records per task: enough to amortize the executor, small enough for a smooth progress bar


class VerifyMode(str, Enum):
    FULL = "full"            # checksums, then a strict decode of every record
    CHECKSUMS = "checksums"  # checksums only: reads every byte, decodes nothing (disk speed)


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
    decoded: int         # records that decoded cleanly to their stated size (0 in checksums mode)
    checksummed: int     # records whose bytes matched their stored checksum (0 without checksums)
    mode: str            # VerifyMode value
    decoder: str         # the backend used, "none" in checksums mode
    jobs: int
    seconds: float
    has_checksums: bool = False
    problems: list[Problem] = field(default_factory=list)
    jpeg_warnings: int = 0   # records that decoded completely after a benign libjpeg warning

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        if not self.ok:
            bad = len({p.index for p in self.problems if p.index is not None})
            whole = sum(p.index is None for p in self.problems)
            parts = [f"{bad:,} bad record(s) of {self.count:,}"] + ([f"{whole} file problem(s)"] if whole else [])
            return f"FAILED: {self.filename} ({self.kind}): {', '.join(parts)}"
        checks = (["match their checksums"] if self.has_checksums else [])
        if self.mode == VerifyMode.FULL.value:
            checks.append(f"decode with {self.decoder} to their stated sizes")
        note = "" if self.has_checksums or self.kind == "folder" else "; no checksums in this file"
        if self.jpeg_warnings:
            note += f"; {self.jpeg_warnings:,} with a harmless libjpeg warning (the image decodes to the end)"
        return (f"OK: {self.filename} ({self.kind}): {self.count:,} records {', '.join(checks)}, labels in "
                f"range ({self.seconds:.1f} s, {self.jobs} threads{note})")

    def to_dict(self) -> dict:
        return {"filename": self.filename, "kind": self.kind, "ok": self.ok, "count": self.count,
                "decoded": self.decoded, "checksummed": self.checksummed, "has_checksums": self.has_checksums,
                "mode": self.mode, "decoder": self.decoder, "jobs": self.jobs, "seconds": self.seconds,
                "jpeg_warnings": self.jpeg_warnings,
                "problems": [{"index": p.index, "path": p.path, "problem": p.problem} for p in self.problems]}


def default_jobs() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def verify(dataset: Store | str | os.PathLike | list, decoder: str | Decoder = "auto", jobs: int | None = None,
           on_progress: Callable[[int, int], None] | None = None,
           mode: VerifyMode | str = VerifyMode.FULL) -> VerifyResult:
    """Verify a store, or what `open_dataset` opens from ``dataset`` (a file, a folder, a
    shard index, a glob or a list of shards; opened and closed here).

    ``on_progress(done, total)`` is called from the calling thread as records finish.
    ``decoder`` is a registered decoder's name, yours included (used in its strict mode,
    if it has one), or a Decoder instance (used as it is); ``mode="checksums"`` decodes nothing.
    A file that exists but will not open is a failed result, not an exception; a
    missing path or decoder, or checksums asked of an image folder, raise as usual.
    """
    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    mode = VerifyMode(mode)
    dec = None
    if mode is VerifyMode.FULL:
        dec = strict_decoder(decoder)
    if isinstance(dataset, Store):
        return _verify(dataset, dec, jobs, on_progress, mode)
    if isinstance(dataset, (str, os.PathLike)):
        path = os.fspath(dataset)
        if url_scheme(path):
            check_url(path)   # a scheme feedline does not read: an error, not a failed result
        elif not os.path.exists(path) and not glob.glob(path):  # a glob matching shard files is fine
            raise StoreError(f"{path}: no such file or folder")
    else:
        path = ", ".join(map(os.fspath, dataset))
    start = time.perf_counter()
    try:
        store = open_dataset(dataset)
    except StoreError as exc:
        return VerifyResult(filename=path, kind="unknown", count=0, decoded=0, checksummed=0, mode=mode.value,
                            decoder=dec.name if dec else "none", jobs=jobs, seconds=time.perf_counter() - start,
                            problems=[Problem(None, None, str(exc))])
    with store:
        return _verify(store, dec, jobs, on_progress, mode)


def strict_decoder(decoder: str | Decoder) -> Decoder:
    """The decoder ``decoder`` names ("auto" included), in strict mode where it has one:
    damaged data (a JPEG cut short, corrupt entropy data) is then an error, not a warning
    and a part-gray image. A Decoder instance is used as it is. The choice of "auto" is
    logged at DEBUG: the summary line names the decoder."""
    from ..decoders.selection import per_image_decoder
    return per_image_decoder(decoder, strict=True, log_level=logging.DEBUG)


def _verify(store: Store, dec: Decoder | None, jobs: int, on_progress, mode: VerifyMode) -> VerifyResult:
    start = time.perf_counter()
    has_checksums = store.checksums is not None
    if mode is VerifyMode.CHECKSUMS and store.kind == "folder":
        raise FeedlineError(f"{store.filename}: an image folder has no checksums; verify it without "
                            "--checksums-only (decodes every image), or pack it first")
    problems = _file_problems(store)
    if mode is VerifyMode.CHECKSUMS and not has_checksums:
        problems.append(Problem(None, None, f"no checksums to check (format version "
                                            f"{store.meta.get('format_version')}, packed before checksums): "
                                            "verify without --checksums-only to decode every record, or pack "
                                            "the image folder again to add checksums"))
    problems += _label_problems(store)
    tally = _Tally()
    if has_checksums or mode is VerifyMode.FULL:
        _check_all(store, dec, jobs, on_progress, tally)
    problems += tally.problems
    problems.sort(key=lambda p: (p.index is not None, p.index or 0))
    return VerifyResult(filename=store.filename, kind=store.kind, count=len(store), decoded=tally.decoded,
                        checksummed=tally.checksummed, jpeg_warnings=tally.jpeg_warnings, mode=mode.value, decoder=dec.name if dec else "none",
                        jobs=jobs, seconds=time.perf_counter() - start, has_checksums=has_checksums,
                        problems=problems)


def _file_problems(store: Store) -> list[Problem]:
    problems = []
    count = store.meta.get("count")
    if count != len(store):
        problems.append(Problem(None, None, f"metadata counts {count} records, the columns hold {len(store)}"))
    problems += [Problem(None, None, text) for text in store.layout_problems()]
    return problems


def _label_problems(store: Store) -> list[Problem]:
    """Each field's own check (`feedline.fields`): classes in their field's list, targets finite,
    boxes with an area inside their image, keypoints labelled inside it."""
    sizes = None if store.kind == "folder" else store.sizes   # a folder's sizes cost a read of every header
    frame = " as packed (turned by its EXIF orientation, if it had one)"   # the frame the stored values are in
    return [Problem(i, store.path(i), text) for i, text in store.target_columns.problems(sizes, frame)]


@dataclass
class _Tally:
    problems: list[Problem] = field(default_factory=list)
    decoded: int = 0
    checksummed: int = 0
    jpeg_warnings: int = 0

    def add(self, other: "_Tally") -> None:
        self.problems += other.problems
        self.decoded += other.decoded
        self.checksummed += other.checksummed
        self.jpeg_warnings += other.jpeg_warnings


def _check_record(store: Store, dec: Decoder | None, index: int, sums: np.ndarray | None, tally: _Tally) -> None:
    try:
        data = store.read(index)
        expected = store.size(index)
    except FeedlineError as exc:
        tally.problems.append(Problem(index, store.path(index), str(exc)))
        return
    if sums is not None:
        actual = checksum(data)
        if actual != int(sums[index]):
            tally.problems.append(Problem(index, store.path(index), f"checksum mismatch (stored {int(sums[index]):016x}, "
                                                                    f"read {actual:016x}): the bytes changed on disk"))
            return
        tally.checksummed += 1
    mask = store.mask_problem(index, dec is not None) if per_pixel(store.fields) else None
    if mask is not None:
        tally.problems.append(Problem(index, store.path(index), mask))
    if dec is None:
        return
    jpeg_warnings.take()   # nothing left over from an earlier decode on this thread
    text = _decode_problem(dec, data, expected)
    if text is None:
        tally.decoded += 1
        tally.jpeg_warnings += jpeg_warnings.take() is not None
    else:
        tally.problems.append(Problem(index, store.path(index), text))


def _decode_problem(dec: Decoder, data, expected: tuple[int, int]) -> str | None:
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


def _check_chunk(store: Store, dec: Decoder | None, start: int, stop: int) -> _Tally:
    tally = _Tally()
    sums = store.checksums
    for i in range(start, stop):
        _check_record(store, dec, i, sums, tally)
    return tally


def _check_all(store: Store, dec: Decoder | None, jobs: int, on_progress, tally: _Tally) -> None:
    n = len(store)
    chunks = iter(range(0, n, CHUNK))
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
                    tally.add(future.result())
                    done_records += pending.pop(future)
                    if on_progress is not None:
                        on_progress(done_records, n)
        except BaseException:
            for future in pending:
                future.cancel()
            raise
