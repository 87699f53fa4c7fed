"""FeedLoader of two git revisions, side by side: is this tree slower than an older one?

    .venv/bin/python bench/before_after.py [--before REV] [--rounds 5] [--n 2000] [--quick]

REV (default: the last commit before the BatchSource refactor) is checked out into a
temporary git worktree. Each round runs one subprocess per revision, alternating, on the
same photo-like JPEG folder; each revision packs that folder with its own packer (once,
cached) and measures its own FeedLoader with its defaults (decoder="auto", RandomResizedCrop
224 + flip + normalize to float32, batch 64, all cores, drop_last) after a warm-up. The
table shows the medians and their quotient; JSON goes to bench/results/local/
(bench/results/before_after.json with --save).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root first on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.args import check_output_flags, output_arguments  # noqa: E402
from bench.common import ROOT, Spread, format_table, ratio, say, write_results  # noqa: E402

BEFORE = "1942543"  # main before the loader took its BatchSource shape (issue 12)

# Run inside each revision's tree: pack the folder once, then time FeedLoader.
_PROBE = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from converters import pack
from feedline import FeedLoader
folder, store, batches, warmup = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
if not os.path.exists(store):
    pack(folder, store + ".tmp.lmdb")
    os.replace(store + ".tmp.lmdb", store)
loader = FeedLoader(store, batch_size=64, shuffle=True, size=224, device="cpu", drop_last=True)

def endless():
    while True:
        yield from loader   # iterating again moves to the next epoch

it = endless()
for _ in range(warmup):
    next(it)
t0, images = time.perf_counter(), 0
for _ in range(batches):
    images += len(next(it)[1])
seconds = time.perf_counter() - t0
print(json.dumps({"images": images, "seconds": seconds, "decoder": str(loader.config.decoder)}), flush=True)
# Measured: leave without tearing the interpreter down under the decode threads (the older
# revision aborts at exit when a loader is left mid-epoch).
os._exit(0)
"""


def worktree(rev: str, where: Path) -> Path:
    if not (where / ".git").exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--force", str(where), rev],
                       check=True, capture_output=True)
    return where


def measure(tree: Path, folder: str, store: Path, batches: int, warmup: int) -> dict:
    done = subprocess.run([sys.executable, "-c", _PROBE, str(tree), folder, str(store), str(batches),
                           str(warmup)], capture_output=True, text=True, cwd=tempfile.gettempdir())
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
    trees = {"before": worktree(args.before, cache / f"tree-{args.before}"), "after": ROOT}
    rates: dict[str, list[float]] = {"before": [], "after": []}
    decoders = {}
    for r in range(args.rounds):
        for name, tree in trees.items():
            store = cache / f"{name}-{args.before if name == 'before' else 'head'}-{args.n}.lmdb"
            row = measure(tree, str(data.folder), store, args.batches, warmup=4)
            rates[name].append(row["images"] / row["seconds"])
            decoders[name] = row["decoder"]
            say(f"round {r + 1}: {name} {rates[name][-1]:,.0f} images/s ({row['decoder']})")
    spreads = {name: Spread.of(values) for name, values in rates.items()}
    rows = [{"name": name, "revision": args.before if name == "before" else "HEAD", "decoder": decoders[name],
             "images_per_s": spreads[name].median, "spread": spreads[name].to_dict(),
             "x_before": ratio(spreads[name].median, spreads["before"].median)} for name in trees]
    say(format_table(rows, [("tree", "name"), ("revision", "revision"), ("decoder", "decoder"),
                            ("images/s", "images_per_s"), ("x before", "x_before")]))
    write_results("before_after", rows, {"before": args.before, "rounds": args.rounds, "n": args.n,
                                         "batches": args.batches, "batch_size": 64, "size": 224,
                                         "threads": os.cpu_count()},
                  out=args.out, quick=args.quick, save=args.save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
