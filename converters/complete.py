"""`pack --resume` when OUT is already complete: a retried or repeated command succeeds.

A complete OUT made from the same input with the same output options is the pack the
command asks for, so it is reported as done (exit 0). Made from other options or
another input, it is refused as before: only --overwrite replaces it.
"""
from __future__ import annotations

import os
import time

from feedline.core.errors import PackError, StoreError
from feedline.dataset.scan import ScanResult

from .journal import differences, scan_digest
from .report import PackReport, error_report_path, read_error_report

INPUT_DIGEST_KEY = "input_digest"   # metadata: scan_digest of the input (files, labels, classes)


def report_complete(scan: ScanResult, out: str, wanted: dict, started: float) -> PackReport:
    """The report of the complete ``out`` when it was packed from ``scan`` with the output
    options ``wanted``; PackError saying what differs otherwise."""
    from feedline.stores import open_dataset  # numpy: only when OUT exists (a pack of JPEGs needs none)
    try:
        with open_dataset(out) as store:
            meta, count = dict(store.meta), len(store)
    except StoreError as exc:
        raise PackError(f"{out} already exists and is not a complete pack ({exc}); "
                        "pass --overwrite to replace it") from None
    had = meta.get("pack_options") or {}
    if had != wanted:
        raise PackError(f"{out} is complete but was packed with other options ({differences(had, wanted)}); "
                        "rerun with the same options, or pass --overwrite to replace it")
    digest = meta.get(INPUT_DIGEST_KEY)
    same_input = digest == scan_digest(scan) if digest is not None else meta.get("source") == scan.root
    if not same_input:
        raise PackError(f"{out} is complete but was packed from other input (the files or labels of "
                        f"{scan.root} differ); pass --overwrite to replace it")
    errors = error_report_path(out)
    skipped = read_error_report(errors) if os.path.exists(errors) else []
    found = count + len(skipped)
    return PackReport(out=out, format=wanted["format"], found=found, packed=count,
                      converted=0, skipped=skipped, seconds=time.perf_counter() - started, resumed_from=found,
                      error_report=errors if skipped else None, already_complete=True)
