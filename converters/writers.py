"""The factory of writers: the one module that knows both formats' writers.

Above `lmdb_writer` and `hdf5_writer`, which share `writer_base` below them.
"""
from __future__ import annotations

from .hdf5_writer import Hdf5Writer
from .lmdb_writer import LmdbWriter
from .options import OutputFormat
from .writer_base import Writer


def make_writer(fmt: OutputFormat, out: str) -> Writer:
    return LmdbWriter(out) if fmt is OutputFormat.LMDB else Hdf5Writer(out)
