"""The factory of writers: the one module that knows both formats' writers.

Above `lmdb_writer` and `hdf5_writer`, which share `writer_base` below them. Each
writer is imported when asked for, so an LMDB pack does not load h5py (a start-up
cost of the `feedline pack` command).
"""
from __future__ import annotations

from .options import OutputFormat
from .writer_base import Writer


def make_writer(fmt: OutputFormat, out: str) -> Writer:
    if fmt is OutputFormat.LMDB:
        from .lmdb_writer import LmdbWriter
        return LmdbWriter(out)
    from .hdf5_writer import Hdf5Writer
    return Hdf5Writer(out)
