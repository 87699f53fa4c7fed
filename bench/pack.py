"""`feedline pack` against `tar -cf` of the same folder, for LMDB and HDF5:

    python bench/pack.py [--n 2000] [--repeats 5] [--jobs J] [--quick] [--cache-dir DIR] [--out PATH]

Generates N photo-like JPEGs once (feedline.sample, cached in --cache-dir) and reads
them once, so every method starts from a warm page cache. Then, interleaved round by
round (round 0 is a warm-up and not counted), it times:

- `tar -cf` of the folder, and `tar -cf` + fsync of the archive (pack ends with an
  fsync: a finished data set must be durable before it is renamed into place);
- `feedline pack SRC OUT` run as a user runs it, a new process from start to exit
  (Python's start-up and imports included): "CLI, end to end". With Python's default
  bytecode cache, kept in a temporary folder (PYTHONPYCACHEPREFIX) and filled by the
  warm-up round: a shell with PYTHONDONTWRITEBYTECODE set (as some development machines
  have) would compile feedline's modules anew in every run, which an installed feedline
  (compiled by pip at install time) never does;
- `converters.pack(...)` called in this process (start-up not counted): "in-process";
- `feedline pack --help`: the start-up alone, for reference.

After the rounds, one more `feedline pack SRC OUT.lmdb` runs under cProfile, and the
functions that cost the most time of their own go into the JSON ("profile"): what a
pack's time is spent on.

Each row shows the median seconds and "x tar", the quotient of its median over tar's
printed median. Target: the CLI end to end within 1.5x of tar. Each output is opened
after its run and its records (or tar members) counted. Writes bench/results/local/pack.json
(bench/results/pack.json with --save).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable

if __package__ in (None, ""):  # `python bench/pack.py`: the repository root, not bench/, on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench.args import check_output_flags, output_arguments  # noqa: E402
from bench.common import ROOT, Spread, format_table, ratio, say, target, targets_table, write_results  # noqa: E402
from bench.data import cache_root, prepare_data  # noqa: E402
from bench.machine import machine_info, machine_line  # noqa: E402

TARGET = 1.5
TAR, TAR_FSYNC = "tar -cf", "tar -cf + fsync"
QUICK = {"n": 24, "repeats": 1}
TOP = 12   # functions of the profile kept in the JSON


class Method:
    """One way of archiving the folder: its kind (reference, CLI, in-process), how to
    run it once, and its output file (None: it writes nothing)."""

    def __init__(self, name: str, kind: str, run: Callable[[], None], output: str | None):
        self.name, self.kind, self.run, self.output = name, kind, run, output


def feedline_command() -> list[str]:
    """`feedline` from this tree: ``python -m feedline``, run in the repository root. It
    imports what the console script `feedline` imports (feedline.cli), whether or not
    this tree is the installed one."""
    return [sys.executable, "-m", "feedline"]


def methods(src: str, work: str, jobs: int | None, pycache: str) -> list[Method]:
    from converters import pack
    cli = feedline_command()
    env = cli_env(pycache)
    jobs_flag = ["--jobs", str(jobs)] if jobs else []

    def tar(fsync: bool) -> Callable[[], None]:
        def run():
            subprocess.run(["tar", "-cf", os.path.join(work, "out.tar"), "-C", src, "."], check=True)
            if fsync:
                fd = os.open(os.path.join(work, "out.tar"), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        return run

    def command(args: list[str]) -> Callable[[], None]:
        return lambda: subprocess.run(cli + args, check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)

    def in_process(out: str) -> Callable[[], None]:
        return lambda: pack(src, os.path.join(work, out), jobs=jobs, progress=False)

    return [
        Method(TAR, "reference", tar(False), "out.tar"),
        Method(TAR_FSYNC, "reference", tar(True), "out.tar"),
        Method("feedline pack lmdb (CLI, end to end)", "cli",
               command(["pack", src, os.path.join(work, "out.lmdb"), *jobs_flag]), "out.lmdb"),
        Method("feedline pack hdf5 (CLI, end to end)", "cli",
               command(["pack", src, os.path.join(work, "out.h5"), *jobs_flag]), "out.h5"),
        Method("pack lmdb (in-process)", "in-process", in_process("out.lmdb"), "out.lmdb"),
        Method("pack hdf5 (in-process)", "in-process", in_process("out.h5"), "out.h5"),
        Method("feedline pack --help (start-up only)", "reference", command(["pack", "--help"]), None),
    ]


def cli_env(pycache: str) -> dict:
    """The CLI's environment: Python's default bytecode cache, kept in ``pycache``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = pycache
    return env


def profile_pack(src: str, work: str, jobs: int | None, pycache: str) -> dict:
    """One `feedline pack SRC OUT.lmdb` under cProfile (wall-clock timer): its seconds and the
    TOP functions by time of their own, with their calls and cumulative time."""
    import pstats
    _clean(work)
    stats_path = os.path.join(pycache, "pack.prof")
    cmd = [sys.executable, "-m", "cProfile", "-o", stats_path, "-m", "feedline", "pack", src,
           os.path.join(work, "out.lmdb"), *(["--jobs", str(jobs)] if jobs else [])]
    subprocess.run(cmd, check=True, cwd=ROOT, env=cli_env(pycache), stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    stats = pstats.Stats(stats_path)
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:TOP]
    top = [{"function": pstats.func_std_string(func).replace(str(ROOT) + os.sep, ""), "calls": calls,
            "self_s": self_s, "cumulative_s": cumulative}
           for func, (_, calls, self_s, cumulative, _) in rows]
    _clean(work)
    return {"total_s": stats.total_tt, "top_by_self_time": top}


def count_items(path: str) -> int:
    """Regular files in a tar archive, or records in a packed file."""
    if path.endswith(".tar"):
        with tarfile.open(path) as archive:
            return sum(member.isfile() for member in archive)
    from feedline.stores import open_dataset
    with open_dataset(path) as store:
        return len(store)


def _warm(folder: str) -> tuple[int, int]:
    """Read every file once; returns (files, bytes)."""
    files = total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            with open(os.path.join(root, name), "rb") as fh:
                total += len(fh.read())
            files += 1
    return files, total


def _clean(work: str) -> None:
    for name in os.listdir(work):
        path = os.path.join(work, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    os.sync()  # each run starts without the previous one's dirty pages being written back


def measure(methods_: list[Method], work: str, repeats: int) -> tuple[dict[str, list[float]], dict[str, dict]]:
    """Seconds per counted round for each method, and what its last output held."""
    seconds: dict[str, list[float]] = {m.name: [] for m in methods_}
    outputs: dict[str, dict] = {}
    for round_ in range(repeats + 1):  # round 0 warms up and is not counted
        for method in methods_:
            _clean(work)
            t0 = time.perf_counter()
            method.run()
            elapsed = time.perf_counter() - t0
            if round_:
                seconds[method.name].append(elapsed)
            if method.output:
                path = os.path.join(work, method.output)
                outputs[method.name] = {"items": count_items(path), "bytes": os.path.getsize(path)}
        say(f"round {round_}/{repeats}" + (" (warm-up, not counted)" if not round_ else ""))
    return seconds, outputs


def rows_of(methods_: list[Method], seconds: dict, outputs: dict, files: int, source_bytes: int) -> list[dict]:
    medians = {name: Spread.of(values).median for name, values in seconds.items()}
    rows = []
    for method in methods_:
        spread = Spread.of(seconds[method.name])
        out = outputs.get(method.name, {})
        writes = method.output is not None
        rows.append({"method": method.name, "kind": method.kind, "median_s": spread.median, "min_s": spread.min,
                     "max_s": spread.max, "files": out.get("items"),
                     "files_per_s": files / spread.median if writes else None,
                     "mib_per_s": source_bytes / 2**20 / spread.median if writes else None,
                     "x_tar": ratio(spread.median, medians[TAR]),
                     "x_tar_fsync": ratio(spread.median, medians[TAR_FSYNC]),
                     "output_mib": out["bytes"] / 2**20 if out else None, "seconds": seconds[method.name]})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/pack.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, help="images (default 2000)")
    p.add_argument("--repeats", type=int, help="timed rounds, interleaved (default 5)")
    p.add_argument("--jobs", type=int, help="pack threads (default: pack's own, one per core)")
    p.add_argument("--quick", action="store_true", help=f"a tiny run for tests: {QUICK}")
    p.add_argument("--cache-dir", help="where the generated images are kept (default .cache/ in the repository)")
    output_arguments(p, "pack")
    args = p.parse_args(argv)
    check_output_flags(p, args)
    n = args.n or (QUICK["n"] if args.quick else 2000)
    repeats = args.repeats or (QUICK["repeats"] if args.quick else 5)

    data = prepare_data(None, n, cache_dir=args.cache_dir, packed=False)
    src = str(data.folder)
    files, source_bytes = _warm(src)
    machine = machine_info()
    say(machine_line(machine))
    say(f"{files} JPEGs, {source_bytes / 2**20:.1f} MiB in {src}; CLI: {' '.join(feedline_command())}")
    work = tempfile.mkdtemp(prefix="pack-bench-", dir=cache_root(args.cache_dir))
    pycache = tempfile.mkdtemp(prefix="pack-bench-pycache-")
    try:
        chosen = methods(src, work, args.jobs, pycache)
        seconds, outputs = measure(chosen, work, repeats)
        profile = profile_pack(src, work, args.jobs, pycache)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(pycache, ignore_errors=True)

    rows = rows_of(chosen, seconds, outputs, files, source_bytes)
    targets = [target(f"{r['method']} / tar -cf", r["x_tar"], TARGET, at_least=False)
               for r in rows if r["kind"] == "cli"]
    say()
    say(format_table(rows, [("method", "method"), ("median s", "median_s"), ("min s", "min_s"), ("max s", "max_s"),
                            ("files", "files"), ("files/s", "files_per_s"), ("MiB/s", "mib_per_s"),
                            ("x tar", "x_tar"), ("x tar+fsync", "x_tar_fsync"), ("output MiB", "output_mib")]))
    say(f"median of {repeats} interleaved rounds; x columns: this row's median over tar's, as printed. "
        "CLI rows: a new `feedline` process each (start-up, imports, pack, fsync); in-process rows: "
        "converters.pack() in this process, start-up not counted.")
    say()
    say(targets_table(targets, args.quick))
    path = write_results("pack", rows, {"n": n, "files": files, "repeats": repeats, "jobs": args.jobs,
                                        "source_bytes": source_bytes, "cli": feedline_command(),
                                        "target_vs_tar": TARGET}, out=args.out, quick=args.quick, save=args.save, machine=machine, targets=targets,
                         profile=profile)
    say(f"profile of one CLI pack ({profile['total_s']:.2f} s under cProfile), by time of its own:")
    for row in profile["top_by_self_time"][:6]:
        say(f"  {row['self_s']:6.3f} s  {row['calls']:6d} calls  {row['function']}")
    say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
