"""What the pack tests compare: a store's full contents, and an unfinished pack's journal,
read straight from the files (lmdb, json), not through the writer that made them."""
from __future__ import annotations

import json
import os

import lmdb

import feedline
from converters import read_error_report
from feedline.format import LMDB_JOURNAL_PREFIX


def snapshot(out: str) -> dict:
    """Everything that must match: records, labels, sizes, paths, checksums, metadata but
    its time, the error report."""
    with feedline.open_dataset(out) as ds:
        recs = [(bytes(ds.read(i)), ds.label(i), ds.size(i), ds.path(i)) for i in range(len(ds))]
        sums = None if ds.checksums is None else ds.checksums.tolist()
        meta = {k: v for k, v in ds.meta.items() if k != "created"}
    report = out + ".errors.csv"
    return {"records": recs, "checksums": sums, "meta": meta,
            "errors": read_error_report(report) if os.path.exists(report) else None}


def committed(out: str) -> int:
    """Scanned files consumed by the last commit of the unfinished pack of ``out`` (0: none)."""
    if os.path.exists(out + ".partial.journal"):   # HDF5: a header line, then one JSON line per commit
        with open(out + ".partial.journal", "rb") as fh:
            raw = fh.read()
        lines = raw[:raw.rfind(b"\n") + 1].splitlines()[1:]  # complete lines only
        return json.loads(lines[-1])["consumed"] if lines else 0
    env = lmdb.open(out + ".partial", subdir=False, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            entries = [json.loads(v) for k, v in txn.cursor() if k.startswith(LMDB_JOURNAL_PREFIX)]
    finally:
        env.close()
    return max((e["consumed"] for e in entries), default=0)
