"""The factory of writers: the one module that knows both formats' writers.

Above `lmdb_writer` and `hdf5_writer`, which share `writer_base` below them. Each
writer is imported when asked for, so an LMDB pack does not load h5py (a start-up
cost of the `feedline pack` command).
"""
from __future__ import annotations

import logging
import os

from feedline.core.errors import PackError, StoreError

from .journal import differences
from .options import OutputFormat
from .writer_base import HDF5_STAGING_SUFFIXES, PARTIAL_SUFFIX, Writer

log = logging.getLogger(__name__)


def make_writer(fmt: OutputFormat, out: str, resume: bool = False) -> Writer:
    """The writer of ``fmt`` for ``out``. An unfinished pack of the other format at the same OUT
    (--format changed since it was interrupted) cannot be continued: ``resume`` refuses it,
    naming the change; a fresh pack removes it (nothing else would)."""
    other = interrupted_format(out)
    if other is not None and other is not fmt:
        partial = out + PARTIAL_SUFFIX
        if resume:
            raise PackError(f"{partial}: the interrupted pack used other options "
                            f"({differences({'format': other.value}, {'format': fmt.value})}); rerun with the same "
                            "options, or start over with --overwrite and no --resume")
        log.warning("%s: discarding an unfinished %s pack", partial, other.value)
        _writer(other, out).discard()
    return _writer(fmt, out)


def interrupted_format(out: str) -> OutputFormat | None:
    """The format of an unfinished pack at ``out`` (its partial file or staging files), if any."""
    partial = out + PARTIAL_SUFFIX
    if any(os.path.exists(partial + suffix) for suffix in HDF5_STAGING_SUFFIXES):
        return OutputFormat.HDF5
    if not os.path.isfile(partial):
        return None
    from feedline.stores.detect import looks_like_hdf5, looks_like_lmdb, read_head   # numpy: only for a leftover
    try:
        head = read_head(partial)
    except StoreError:   # unreadable: the writer will say so
        return None
    return OutputFormat.LMDB if looks_like_lmdb(head) else OutputFormat.HDF5 if looks_like_hdf5(head) else None


def _writer(fmt: OutputFormat, out: str) -> Writer:
    if fmt is OutputFormat.LMDB:
        from .lmdb_writer import LmdbWriter
        return LmdbWriter(out)
    from .hdf5_writer import Hdf5Writer
    return Hdf5Writer(out)
