"""A shard's head: its metadata and columns without its images, a small object stored
beside the shard in a bucket (``NAME.head``), so that a reader learns every record's
label, size, checksum and path without fetching the shards it will not read.

An .npz of uint8 arrays (metadata JSON, then each column's stored bytes), loaded with
``allow_pickle=False``: a file from elsewhere cannot run code.
"""
from __future__ import annotations

import io
import zipfile

import numpy as np

from ..core.errors import StoreError
from ..dataset.format import Columns, meta_to_bytes, parse_meta
from ..dataset.targets import TargetColumns
from .base import Store, column_names, load_columns, load_targets

HEAD_SUFFIX = ".head"


def head_bytes(store: Store) -> bytes:
    """The head of the open shard ``store``."""
    buffers = {**store.columns.to_bytes(), **store.target_columns.to_bytes()}
    arrays = {"meta": np.frombuffer(meta_to_bytes(store.meta), dtype=np.uint8),
              "byte_lengths": np.asarray(store.byte_lengths(), dtype="<i8")}
    arrays.update({f"column.{name}": np.frombuffer(buffers[name], dtype=np.uint8)
                   for name in column_names(store.meta)})
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


def parse_head(raw: bytes, where: str) -> tuple[dict, Columns, TargetColumns, np.ndarray]:
    """(metadata, columns, target columns, each record's byte length) of a shard's head;
    StoreError when damaged."""
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
            meta = parse_meta(npz["meta"].tobytes(), where)
            buffers = {name: npz[f"column.{name}"].tobytes() for name in column_names(meta)}
            lengths = npz["byte_lengths"].astype(np.int64)
    except (ValueError, KeyError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise StoreError(f"{where}: the shard's head is damaged ({exc}); upload the data set again "
                         "with `feedline pack SRC URL --resume`") from None
    count = meta["count"]
    if len(lengths) != count:
        raise StoreError(f"{where}: the shard's head lists {len(lengths)} record lengths for {count} records; "
                         "upload the data set again with `feedline pack SRC URL --resume`")
    return meta, load_columns(buffers, count, where), load_targets(meta, buffers, count, where), lengths
