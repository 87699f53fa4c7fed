"""Pack time against `tar -cf` of the same folder, for LMDB and HDF5:

    python bench/pack.py [--n 2000] [--repeats 5] [--jobs J] [--cache-dir DIR] [--out PATH]

Generates N photo-like JPEGs once (feedline.sample, ~20 ms each, cached in
--cache-dir), reads them once so every method starts from a warm page cache, then
times, interleaved round by round, `tar -cf` of the folder and `pack` into LMDB and
HDF5, and reports medians. `pack` runs in this process, so Python's start-up is not
counted (tar's, a few ms, is). pack ends with an fsync (a finished data set must be
durable before it is renamed into place) and tar does not, so "tar + fsync" is shown
too, for reference. Target: pack within 1.5x of tar. Writes bench/results/pack.json.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from pathlib import Path

if __package__ in (None, ""):  # `python bench/pack.py`: the repository root, not bench/, on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench import common  # noqa: E402
from bench.machine import machine_info, machine_line  # noqa: E402

TARGET = 1.5


def _files(folder: str) -> list[str]:
    return [os.path.join(d, f) for d, _, names in os.walk(folder) for f in names]


def _warm(paths: list[str]) -> int:
    total = 0
    for path in paths:
        with open(path, "rb") as fh:
            total += len(fh.read())
    return total


def _tar(src: str, out: str, fsync: bool = False) -> None:
    subprocess.run(["tar", "-cf", out, "-C", src, "."], check=True)
    if fsync:
        fd = os.open(out, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _methods(src: str, work: str, jobs: int | None) -> dict:
    from converters import pack

    def packer(ext: str):
        return lambda: pack(src, os.path.join(work, f"out.{ext}"), jobs=jobs, progress=False, overwrite=True)

    return {
        "tar -cf": lambda: _tar(src, os.path.join(work, "out.tar")),
        "tar -cf + fsync": lambda: _tar(src, os.path.join(work, "out.tar"), fsync=True),
        "pack lmdb": packer("lmdb"),
        "pack hdf5": packer("h5"),
    }


OUTPUTS = {"tar -cf": "out.tar", "tar -cf + fsync": "out.tar", "pack lmdb": "out.lmdb", "pack hdf5": "out.h5"}


def _clean(work: str) -> None:
    for name in os.listdir(work):
        os.remove(os.path.join(work, name))
    os.sync()  # each run starts without the previous one's dirty pages being written back


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=2000, help="images (default 2000)")
    p.add_argument("--repeats", type=int, default=5, help="timed rounds, interleaved (default 5)")
    p.add_argument("--jobs", type=int, help="pack threads (default: one per core)")
    p.add_argument("--cache-dir", help="where the generated images are kept (default ~/.cache/feedline)")
    p.add_argument("--out", help="JSON path (default bench/results/pack.json)")
    args = p.parse_args(argv)

    from bench.data import cache_root, prepare_data
    data = prepare_data(None, args.n, cache_dir=args.cache_dir, packed=False)
    src = str(data.folder)
    paths = _files(src)
    source_bytes = _warm(paths)
    machine = machine_info()
    common.say(machine_line(machine))
    common.say(f"{len(paths)} JPEGs, {source_bytes / 2**20:.1f} MiB in {src}")
    work = tempfile.mkdtemp(prefix="pack-bench-", dir=cache_root(args.cache_dir))
    try:
        methods = _methods(src, work, args.jobs)
        seconds: dict[str, list[float]] = {name: [] for name in methods}
        sizes: dict[str, int] = {}
        for round_ in range(args.repeats + 1):  # round 0 warms up and is not counted
            for name, run in methods.items():
                _clean(work)
                t0 = time.perf_counter()
                run()
                elapsed = time.perf_counter() - t0
                sizes[name] = os.path.getsize(os.path.join(work, OUTPUTS[name]))
                if round_:
                    seconds[name].append(elapsed)
            common.say(f"round {round_}/{args.repeats}" + (" (warm-up)" if not round_ else ""))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    tar = common.Spread.of(seconds["tar -cf"]).median
    tar_fsync = common.Spread.of(seconds["tar -cf + fsync"]).median
    rows = []
    for name, values in seconds.items():
        spread = common.Spread.of(values)
        rows.append({"method": name, "median_s": spread.median, "min_s": spread.min, "max_s": spread.max,
                     "files_per_s": len(paths) / spread.median,
                     "mib_per_s": source_bytes / 2**20 / spread.median,
                     "vs_tar": spread.median / tar, "vs_tar_fsync": spread.median / tar_fsync,
                     "output_mib": sizes[name] / 2**20, "seconds": values})
    common.say()
    common.say(common.format_table(rows, [("method", "method"), ("median s", "median_s"), ("min s", "min_s"),
                                          ("max s", "max_s"), ("files/s", "files_per_s"),
                                          ("MiB/s", "mib_per_s"), ("x tar", "vs_tar"),
                                          ("x tar+fsync", "vs_tar_fsync"), ("output MiB", "output_mib")]))
    verdicts = [f"{r['method']}: {r['vs_tar']:.2f}x tar" for r in rows if r["method"].startswith("pack")]
    ok = all(r["vs_tar"] <= TARGET for r in rows if r["method"].startswith("pack"))
    common.say(f"\n{'; '.join(verdicts)} -> {'within' if ok else 'NOT within'} the {TARGET}x target")
    path = common.write_results("pack", rows, {"n": len(paths), "repeats": args.repeats, "jobs": args.jobs,
                                               "source_bytes": source_bytes, "target_vs_tar": TARGET},
                                out=args.out, machine=machine, within_target=ok)
    common.say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
