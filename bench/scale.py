"""A million records: what opening, planning and feeding cost as a data set grows.

    python bench/scale.py [--records 1000000] [--small 10000] [--formats lmdb,hdf5]
                          [--batches 30] [--cache-dir DIR] [--quick] [--out PATH]

For each format, a store of ``--records`` tiny photo-like JPEGs (64x48, about 2 KiB) and
one of ``--small`` records are written once into CACHE/scale (see bench/scale_store.py:
the records go through the packer's writers from memory, not a million files), timed:
the write rate. Then each store is measured in a fresh process (bench/scale_probe.py):

- opening it (``open_dataset``) with its pages dropped from the page cache, and again warm;
- the RAM opening holds per record: the per-record arrays (labels, sizes, path offsets,
  paths, checksums, HDF5's offsets) and the process's anonymous memory before and after;
- the epoch permutation (``EpochPlan.samples``), random and quasi-random;
- FeedLoader (batch 256, 32x32 crops, 2 threads): the first batch of an epoch, the median
  time per batch of the next ``--batches``, ``state_dict()``, and the first batch of a
  loader resumed mid-epoch; random and quasi-random order.

Nothing in a batch may cost O(records) in Python: the time per batch at ``--records``
over the time at ``--small`` stays near 1, both for planning a batch (EpochPlan.batches:
Python alone) and for the loader's batches (which also meet the memory hierarchy: a
store 100x larger spreads reads over 100x more pages). Targets (at ``--records``, each
format): open under 1 s, under 100 bytes of RAM per record, first batch under 1 s, time
per batch within 1.25x of the small store's. Writes bench/results/local/scale.json
(bench/results/scale.json with --save).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):  # `python bench/scale.py`: the repository root, not bench/, on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench.args import check_output_flags, output_arguments  # noqa: E402
from bench.common import ROOT, format_table, say, target, targets_table, write_results  # noqa: E402
from bench.data import cache_root  # noqa: E402
from bench.machine import machine_info, machine_line  # noqa: E402
from bench.scale_store import cached_store, jpeg_pool  # noqa: E402

EXTENSIONS = {"lmdb": "lmdb", "hdf5": "h5"}
QUICK = {"records": 3000, "small": 1200, "batches": 3}
OPEN_S, BYTES_PER_RECORD, FIRST_BATCH_S, FLAT = 1.0, 100, 1.0, 1.25


def probe(path: str, batches: int) -> dict:
    """bench/scale_probe.py's JSON for ``path``, from a fresh process."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "scale_probe.py"), path, "--batches", str(batches)],
                          check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def row_of(fmt: str, written, measured: dict) -> dict:
    n = measured["records"]
    rnd, quasi = measured["random"], measured["quasi_random"]
    return {"format": fmt, "records": n, "file_mib": os.path.getsize(written.path) / 2**20,
            "write_s": written.seconds, "write_records_per_s": written.records_per_s,
            "write_mib_per_s": written.mib_per_s,
            "open_cold_s": measured["open_cold_s"], "open_warm_s": measured["open_warm_s"],
            "held_bytes_per_record": measured["held_bytes"] / n,
            "rss_bytes_per_record": measured["rss_anon_open"] / n,
            "epoch_rss_bytes_per_record": rnd["rss_anon_epoch"] / n,
            "permutation_random_s": measured["permutation_random_s"],
            "permutation_quasi_s": measured["permutation_quasi_random_s"],
            "first_batch_random_s": rnd["first_batch_s"], "first_batch_quasi_s": quasi["first_batch_s"],
            "resume_first_batch_s": rnd["resume_first_batch_s"], "plan_batch_us": measured["plan_batch_us"],
            "batch_ms_random": rnd["batch_ms"], "batch_ms_quasi": quasi["batch_ms"],
            "state_dict_us": rnd["state_dict_us"], "probe": measured}


def targets_of(rows: list[dict], big: int, small: int) -> list[dict]:
    found = []
    for fmt in sorted({r["format"] for r in rows}):
        b = next(r for r in rows if r["format"] == fmt and r["records"] == big)
        s = next(r for r in rows if r["format"] == fmt and r["records"] == small)
        ram = max(b["held_bytes_per_record"], b["rss_bytes_per_record"])
        found += [
            target(f"{fmt}: open_dataset, pages dropped, {big:,} records (s)", b["open_cold_s"], OPEN_S, False, " s"),
            target(f"{fmt}: RAM held per record after open (bytes)", ram, BYTES_PER_RECORD, False, " B"),
            target(f"{fmt}: first batch, random (s)", b["first_batch_random_s"], FIRST_BATCH_S, False, " s"),
            target(f"{fmt}: first batch, quasi-random (s)", b["first_batch_quasi_s"], FIRST_BATCH_S, False, " s"),
            target(f"{fmt}: first batch resumed mid-epoch (s)", b["resume_first_batch_s"], FIRST_BATCH_S, False, " s"),
            target(f"{fmt}: planning a batch, {big:,} / {small:,} records", b["plan_batch_us"] / s["plan_batch_us"],
                   FLAT, False),
            target(f"{fmt}: loader time per batch, {big:,} / {small:,} records",
                   b["batch_ms_random"] / s["batch_ms_random"], FLAT, False)]
    return found


COLUMNS = [("format", "format"), ("records", "records"), ("MiB", "file_mib"), ("write rec/s", "write_records_per_s"),
           ("open cold s", "open_cold_s"), ("open warm s", "open_warm_s"), ("held B/rec", "held_bytes_per_record"),
           ("RSS B/rec", "rss_bytes_per_record"), ("epoch RSS B/rec", "epoch_rss_bytes_per_record"),
           ("perm rnd s", "permutation_random_s"), ("perm quasi s", "permutation_quasi_s"),
           ("1st batch rnd s", "first_batch_random_s"), ("1st batch quasi s", "first_batch_quasi_s"),
           ("resumed 1st s", "resume_first_batch_s"), ("plan us/batch", "plan_batch_us"),
           ("ms/batch rnd", "batch_ms_random"),
           ("ms/batch quasi", "batch_ms_quasi"), ("state_dict us", "state_dict_us")]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/scale.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, help="records of the large store (default 1,000,000)")
    p.add_argument("--small", type=int, help="records of the small store (default 10,000)")
    p.add_argument("--formats", default="lmdb,hdf5", help="lmdb, hdf5 or both (default both)")
    p.add_argument("--batches", type=int, help="batches timed after the first (default 100)")
    p.add_argument("--quick", action="store_true", help=f"a tiny run for tests: {QUICK}")
    p.add_argument("--cache-dir", help="where the stores are kept (default .cache/ in the repository)")
    output_arguments(p, "scale")
    args = p.parse_args(argv)
    check_output_flags(p, args)
    quick = QUICK if args.quick else {}
    big = args.records or quick.get("records", 1_000_000)
    small = args.small or quick.get("small", 10_000)
    batches = args.batches or quick.get("batches", 100)
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    unknown = [f for f in formats if f not in EXTENSIONS]
    if unknown or small >= big:
        print(f"bench/scale.py: error: {'unknown format ' + ', '.join(unknown) if unknown else '--small must be below --records'}",
              file=sys.stderr)
        return 2

    machine = machine_info()
    say(machine_line(machine))
    folder = str(cache_root(args.cache_dir) / "scale")
    pool = None
    rows = []
    for fmt in formats:
        for n in (small, big):
            if pool is None and not os.path.exists(os.path.join(folder, f"records-{n}.{EXTENSIONS[fmt]}")):
                pool = jpeg_pool()
            written = cached_store(folder, n, EXTENSIONS[fmt], pool)
            say(f"{fmt}, {n:,} records: {written.path}" + ("" if written.seconds else " (cached: write rate not measured)"))
            rows.append(row_of(fmt, written, probe(written.path, batches)))
    say()
    say(format_table(rows, COLUMNS))
    say("write: records through the packer's writers from memory (bench/scale_store.py); open cold: the store's "
        "pages dropped first; held: per-record arrays; RSS: anonymous memory opening added; epoch RSS: during an "
        "epoch (with the epoch's order and the loader's buffers); perm: EpochPlan.samples; batches of 256, 32x32, "
        "2 threads; plan: EpochPlan.batches, one batch's indices, crops and labels (Python's work per batch); "
        "ms/batch: the loader's, median of the batches after the first, on a warm page cache.")
    say()
    targets = targets_of(rows, big, small)
    say(targets_table(targets, args.quick))
    path = write_results("scale", rows, {"records": big, "small": small, "formats": formats, "batches": batches,
                                         "batch_size": 256, "size": 32, "threads": 2,
                                         "load_average": os.getloadavg()}, out=args.out, quick=args.quick, save=args.save, machine=machine,
                         targets=targets)
    say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
