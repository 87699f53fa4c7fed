"""The Store interface: random access to the records of a data set."""
from __future__ import annotations

import logging
import operator
import os
from abc import ABC, abstractmethod

import numpy as np

from ..core.errors import ChecksumError, StoreError
from ..dataset.format import CHECKSUMS, COLUMN_NAMES, Columns, checksum, class_lists_of, fields_of, has_checksums
from ..dataset.targets import FIELD_COLUMNS, FieldsError, TargetColumns
from .advice import will_need
from .process_local import process_lock
from .record_targets import RecordTargets

log = logging.getLogger(__name__)

_warned_no_checksums: set[str] = set()   # files already reported, so each is reported once


class Store(RecordTargets, ABC):
    """Random access to records: encoded bytes, targets, (height, width), source path.
    Thread-safe: many threads may call ``read`` at once, with no global lock on the read
    path. Fork-safe (``before_fork`` first): a child never touches, even to close, what it inherited."""

    filename: str   # the file or folder the store was opened from
    kind: str       # "lmdb", "hdf5" or "folder"
    classes: list[str]
    meta: dict
    columns: Columns
    _targets: TargetColumns | None = None   # set at open by stores with fields beyond label

    def __len__(self) -> int:
        return len(self.columns)

    @abstractmethod
    def read(self, index: int):
        """The encoded image of record ``index`` as a bytes-like object (buffer protocol)."""

    def read_checked(self, index: int):
        """``read(index)``, checked against the checksum stored at pack time; ChecksumError
        when the bytes changed since. Stores without checksums (version 1, folders) just read."""
        i = self._check(index)
        data = self.read(i)
        sums = self.columns.checksums
        if sums is not None:
            actual = checksum(data)
            if actual != int(sums[i]):
                raise self.mismatch_error(i, int(sums[i]), actual)
        return data

    def mismatch_error(self, index: int, expected: int, actual: int, what: str = "the bytes") -> ChecksumError:
        """The error for record ``index`` whose bytes hash to ``actual``, not ``expected``."""
        return checksum_mismatch(self.filename, index, self.path(index), expected, actual, what)

    @property
    def checksums(self) -> np.ndarray | None:
        """The xxh3_64 of every record (uint64), or None when the store has none."""
        return self.columns.checksums

    def label(self, index: int) -> int:
        return int(self.columns.labels[self._check(index)])

    @property
    def fields(self) -> dict[str, dict]:
        """The fields the store was packed with (`feedline.fields`): {"label": {}} before version 3."""
        return fields_of(self.meta)

    @property
    def class_lists(self) -> dict[str, list[str]]:
        """Each field's own class list (field -> names); ``classes`` is the label's (or the first)."""
        return class_lists_of(self.meta)

    @property
    def target_columns(self) -> TargetColumns:
        """Every field's columns, flat arrays: what an engine copies a batch's targets from
        (``batch_layout``, ``fill``) without a Python object per sample."""
        if self._targets is None:
            self._targets = TargetColumns(self.fields, {"labels": self.columns.labels}, len(self), self.class_lists)
        return self._targets

    def size(self, index: int) -> tuple[int, int]:
        h, w = self.columns.sizes[self._check(index)]
        return int(h), int(w)

    def path(self, index: int) -> str:
        """Source path of record ``index``, relative to the packed folder."""
        return self.columns.path(self._check(index))

    @property
    def labels(self) -> np.ndarray:
        return self.columns.labels

    @property
    def sizes(self) -> np.ndarray:
        return self.columns.sizes

    def byte_lengths(self) -> np.ndarray:
        """The encoded size in bytes of every record (int64), without decoding anything."""
        return np.fromiter((len(memoryview(self.read(i))) for i in range(len(self))),
                           dtype=np.int64, count=len(self))

    def byte_ranges(self, first: int, stop: int) -> list[tuple[str, int, int]]:
        """Where the encoded bytes of records ``first .. stop - 1`` lie: (file, offset,
        length) runs in file order, near neighbours joined. Empty when the store cannot say."""
        self._check_span(first, stop)
        return []

    def will_need(self, first: int, stop: int) -> int:
        """Advise the kernel to read records ``first .. stop - 1`` into the page cache now, in
        large requests, without waiting (posix_fadvise WILLNEED); returns the bytes advised.
        A hint: it changes how fast later reads are, never what they return."""
        return will_need(self.byte_ranges(first, stop))

    def _check_span(self, first: int, stop: int) -> None:
        if not 0 <= first <= stop <= len(self):
            raise IndexError(f"{self.filename}: records {first}..{stop - 1} are not within 0..{len(self) - 1}")

    def files(self) -> list[str]:
        """The data files read: one for a packed file, the shards of a sharded set."""
        return [self.filename]

    def layout_problems(self) -> list[str]:
        """Damage that opening does not look for because it costs a pass over all keys:
        records stored beyond the count, leftovers of an unfinished pack. Empty when sound."""
        return []

    def _check(self, index: int) -> int:
        try:
            index = operator.index(index)
        except TypeError:
            raise TypeError(f"{self.filename}: record index must be an integer, "
                            f"not {type(index).__name__}") from None
        n = len(self.columns)
        if not -n <= index < n:
            raise IndexError(f"{self.filename}: record {index} out of range (0..{n - 1})")
        return index % n if index < 0 else index

    def _note_missing_checksums(self) -> None:
        """Say once per file (per process) that a packed file predates checksums."""
        if self.columns.checksums is not None:
            return
        key = os.path.realpath(self.filename)
        with process_lock():   # a lock of this process: one held at a fork stays with the parent
            if key in _warned_no_checksums:
                return
            _warned_no_checksums.add(key)
        log.warning("%s: format version %s has no checksums: damaged bytes cannot be told from good "
                    "ones. Pack the image folder again to add them.",
                    self.filename, self.meta.get("format_version"))

    def before_fork(self) -> None:
        """Call in the parent just before forking processes that will read this store."""

    def close(self) -> None:
        """Release file handles. Reading after close reopens them."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.filename!r}: {len(self)} records, {len(self.classes)} classes>"


def checksum_mismatch(filename: str, index: int, path: str, expected: int, actual: int,
                      what: str = "the bytes") -> ChecksumError:
    """A record's checksum mismatch: what, where and what to do; ``.detail`` is what the
    loader's one-line error adds after naming the record and before its own advice. ``what``:
    the bytes read (the image's, or "its mask's bytes")."""
    return ChecksumError(
        f"{filename}: record {index} ({path}): checksum mismatch (stored {expected:016x}, "
        f"{what} read hash to {actual:016x}): the file changed on disk after it was packed. "
        "Copy it again or pack the source folder again (feedline pack SRC OUT --overwrite); "
        "`feedline verify --checksums-only` lists every damaged record; to train past damaged "
        "records, pass on_error='substitute'.", filename, index, path,
        detail=(f"stored {expected:016x}, {what} read hash to {actual:016x}: the file changed on "
                "disk after it was packed; copy it again or pack the source folder again "
                "(feedline pack SRC OUT --overwrite)"))


def column_names(meta: dict) -> tuple[str, ...]:
    """The columns a packed file with this (parsed) metadata stores, in storage order."""
    fields = [name for field in fields_of(meta) for name in FIELD_COLUMNS[field] if name not in COLUMN_NAMES]
    return COLUMN_NAMES + ((CHECKSUMS,) if has_checksums(meta) else ()) + tuple(fields)


def load_targets(meta: dict, buffers: dict, count: int, where: str) -> TargetColumns:
    """The fields' columns, checked against ``count`` and their specs."""
    try:
        return TargetColumns.from_buffers(fields_of(meta), buffers, count, class_lists_of(meta))
    except (FieldsError, ValueError) as exc:
        raise StoreError(f"{where}: a target column is damaged ({exc}). Pack it again.") from None


def load_columns(buffers: dict, count: int, where: str) -> Columns:
    """Columns from raw buffers, checked well enough that ``path(i)`` cannot go astray.

    Labels and sizes are not judged here: ``feedline verify`` reports those per record.
    """
    try:
        cols = Columns.from_buffers(buffers, count, where)
    except ValueError as exc:  # a buffer whose length is not a whole number of items
        raise StoreError(f"{where}: a column is damaged ({exc}). Pack it again.") from None
    offsets = cols.path_offsets
    if count and (offsets[0] != 0 or offsets[-1] != len(cols.path_bytes)
                  or bool(np.any(offsets[1:] < offsets[:-1]))):
        raise StoreError(f"{where}: the path column is damaged (offsets out of order or past "
                         "the end). Pack it again.")
    return cols
