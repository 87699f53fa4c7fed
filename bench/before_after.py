"""FeedLoader's thread path of two git revisions, side by side: is this tree slower than an
older one, and what does writing into reused batches save?

    .venv/bin/python bench/before_after.py [--before REV] [--rounds 5] [--n 2000] [--quick]

REV (default: main before the thread path flowed one way, issue 19) is exported with
``git archive`` into the bench cache. Each round runs one subprocess per revision and
output, alternating, on the same photo-like JPEG folder; each revision packs that folder
with its own packer (once, cached) and measures its own FeedLoader on the CPU
(decoder="auto", RandomResizedCrop 224 + flip, batch 64, all cores, drop_last) after a
warm-up, dropping each batch as a training loop does. Two outputs: float32 normalized (the
default) and uint8 (mean=None). Besides images/s it reports the decode threads' time per
image spent writing the batch (``stats.copy_s``: the normalization, or the uint8 copy):
before, every batch was new memory the threads first touched; after, the batch is a reused
slot of the ring and a uint8 sample is decoded straight into it. The table shows medians
and quotients; JSON goes to bench/results/local/
(bench/results/before_after.json with --save).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root first on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.args import check_output_flags, output_arguments  # noqa: E402
from bench.common import ROOT, Spread, format_table, ratio, say, write_results  # noqa: E402

BEFORE = "95e6d18"  # main before the thread path flowed one way (issue 19)
OUTPUTS = {"float32": "(0.485, 0.456, 0.406)", "uint8": "None"}

# Run inside each revision's tree: pack the folder once, then time FeedLoader.
_PROBE = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from converters import pack
from feedline import FeedLoader
folder, store, batches, warmup, mean = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), eval(sys.argv[6])
if not os.path.exists(store):
    pack(folder, store + ".tmp.lmdb")
    os.replace(store + ".tmp.lmdb", store)
std = None if mean is None else (0.229, 0.224, 0.225)
loader = FeedLoader(store, batch_size=64, shuffle=True, train=True, size=224, device="cpu", drop_last=True, mean=mean, std=std)

def endless():
    while True:
        yield from loader   # iterating again moves to the next epoch

it = endless()
for _ in range(warmup):
    next(it)
stats = loader.stats
base, copied, counted = (stats.copy_s, stats.images), 0.0, 0
t0, images = time.perf_counter(), 0
for _ in range(batches):
    images += len(next(it)[1])   # dropped at once, as a training step does
    if loader.stats is not stats:   # a new epoch: its stats start afresh
        copied, counted = copied + stats.copy_s - base[0], counted + stats.images - base[1]
        stats, base = loader.stats, (0.0, 0)
seconds = time.perf_counter() - t0
copied, counted = copied + stats.copy_s - base[0], counted + stats.images - base[1]
copy_ms = 1e3 * copied / max(counted, 1)
print(json.dumps({"images": images, "seconds": seconds, "decoder": str(loader.config.decoder),
                  "copy_ms": copy_ms}), flush=True)
# Measured: leave without tearing the interpreter down under the decode threads.
os._exit(0)
"""


def export(rev: str, where: Path) -> Path:
    """The tree of ``rev``, written once under ``where`` (git archive: no worktree is registered)."""
    if not (where / "feedline").exists():
        tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
        where.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
            archive.extractall(where, filter="data")
    return where


def measure(tree: Path, folder: str, store: Path, batches: int, warmup: int, mean: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _PROBE, str(tree), folder, str(store), str(batches),
                           str(warmup), mean], capture_output=True, text=True, cwd=tempfile.gettempdir())
    if done.returncode != 0:
        raise SystemExit(f"{tree}: the probe failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/before_after.py", description=__doc__.splitlines()[0])
    p.add_argument("--before", default=BEFORE, metavar="REV", help=f"the older revision (default {BEFORE})")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--n", type=int, default=2000, help="photo-like JPEGs generated (default 2000)")
    p.add_argument("--batches", type=int, default=25, help="timed batches of 64 per measurement (default 25)")
    p.add_argument("--quick", action="store_true", help="a tiny run, to check the script works")
    output_arguments(p, "before_after")
    args = p.parse_args(argv)
    check_output_flags(p, args)
    if args.quick:
        args.rounds, args.n, args.batches = 1, 200, 2
    from bench.data import cache_root, prepare_data
    data = prepare_data(None, args.n, packed=False)
    cache = cache_root(None) / "before-after"
    cache.mkdir(parents=True, exist_ok=True)
    trees = {"before": export(args.before, cache / f"tree-{args.before}"), "after": ROOT}
    runs = [(tree, output) for output in OUTPUTS for tree in trees]
    rates: dict = {run: [] for run in runs}
    copies: dict = {run: [] for run in runs}
    decoders = {}
    for r in range(args.rounds):
        for name, output in runs:
            store = cache / f"{name}-{args.before if name == 'before' else 'head'}-{args.n}.lmdb"
            row = measure(trees[name], str(data.folder), store, args.batches, 4, OUTPUTS[output])
            rates[name, output].append(row["images"] / row["seconds"])
            if row["copy_ms"] is not None:
                copies[name, output].append(row["copy_ms"])
            decoders[name] = row["decoder"]
            say(f"round {r + 1}: {name} {output}: {rates[name, output][-1]:,.0f} images/s, "
                f"writing the batch {row['copy_ms'] or float('nan'):.3f} ms/image ({row['decoder']})")
    rows = []
    for name, output in runs:
        speed = Spread.of(rates[name, output])
        copy = Spread.of(copies[name, output]) if copies[name, output] else None
        before_speed = Spread.of(rates["before", output]).median
        before_copy = Spread.of(copies["before", output]).median if copies["before", output] else None
        rows.append({"name": name, "output": output, "revision": args.before if name == "before" else "HEAD",
                     "decoder": decoders[name], "images_per_s": speed.median, "spread": speed.to_dict(),
                     "x_before": ratio(speed.median, before_speed),
                     "copy_ms_per_image": copy.median if copy else None,
                     "copy_x_before": ratio(copy.median if copy else None, before_copy)})
    say(format_table(rows, [("tree", "name"), ("output", "output"), ("revision", "revision"),
                            ("decoder", "decoder"), ("images/s", "images_per_s"), ("x before", "x_before"),
                            ("write ms/img", "copy_ms_per_image"), ("write x before", "copy_x_before")]))
    write_results("before_after", rows, {"before": args.before, "rounds": args.rounds, "n": args.n,
                                         "batches": args.batches, "batch_size": 64, "size": 224,
                                         "threads": os.cpu_count(), "outputs": list(OUTPUTS)},
                  out=args.out, quick=args.quick, save=args.save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
