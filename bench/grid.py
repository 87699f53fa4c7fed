"""Grid store against original store: the same photos, the same loader settings, one run.

    .venv/bin/python bench/grid.py [--n 600] [--rounds 3] [--batches 12] [--quick] [--save]

Generates photo-like JPEGs (`feedline sample`'s photos) and packs them twice through the
CLI, `--layout original` and `--layout grid`, alternating (pack time and size). Then,
in interleaved rounds: FeedLoader on each store (RandomResizedCrop 224 + flip to
float32, batch 64, all cores, decoder "auto": on the grid store a GridDecoder, chosen by
the loader itself), and one thread's `decode_into` with the loader's decoder, of the same
RandomResizedCrop boxes (the decode alone, before any loader starts). Each loader measurement first drains
the batches that loader buffered while the other was timed. Medians and their quotients are printed;
JSON goes to bench/results/grid.json with --save.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root first on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, Spread, format_table, ratio, say, target, targets_table, write_results  # noqa: E402

LAYOUTS = ("original", "grid")


def pack_cli(folder: str, out: Path, layout: str) -> float:
    """Seconds `feedline pack --layout LAYOUT` takes, end to end (interpreter start included)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "feedline", "pack", folder, str(out), "--layout", layout,
                    "--overwrite", "--quiet"], check=True, env=env, cwd=str(ROOT))
    return time.perf_counter() - t0


def loader_for(path: Path):
    from feedline import FeedLoader
    return FeedLoader(str(path), batch_size=64, shuffle=True, train=True, size=224, device="cpu", drop_last=True,
                      decoder="auto")   # on the grid store a GridDecoder, by itself


def endless(loader):
    while True:
        yield from loader   # iterating again moves to the next epoch


DRAIN = 6   # untimed batches first: what a loader decoded ahead while the other one was timed


def loader_rate(batches, count: int) -> float:
    for _ in range(DRAIN):
        next(batches)
    t0, images = time.perf_counter(), 0
    for _ in range(count):
        images += len(next(batches)[1])
    return images / (time.perf_counter() - t0)


def decode_jobs(path: Path, n: int):
    """(decoder, [(bytes, box)]) for one thread's decode_into of RandomResizedCrop boxes."""
    import numpy as np
    from feedline import open_dataset
    from feedline.augment import random_resized_crop, uniforms
    from feedline.decoders.base import Box
    from feedline.selection import thread_decoder
    store = open_dataset(str(path))
    decoder = thread_decoder("auto", store)   # the loader's choice: on the grid store a GridDecoder
    count = min(n, len(store))
    sizes = np.asarray(store.sizes[:count])
    boxes = random_resized_crop(sizes[:, 0], sizes[:, 1], uniforms(7, 0, range(count), 22))
    return decoder, [(bytes(store.read(i)), Box(*map(int, boxes[i]))) for i in range(count)]


def decode_rate(decoder, jobs) -> float:
    import numpy as np
    out = np.empty((224, 224, 3), np.uint8)
    t0 = time.perf_counter()
    for data, box in jobs:
        decoder.decode_into(data, box, False, out)
    return len(jobs) / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    from bench.args import check_output_flags, output_arguments
    p = argparse.ArgumentParser(prog="bench/grid.py", description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=600, help="photo-like JPEGs generated (default 600)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--batches", type=int, default=12, help="timed batches of 64 per loader and round")
    p.add_argument("--quick", action="store_true", help="a tiny run, to check the script works")
    output_arguments(p, "grid")
    args = p.parse_args(argv)
    check_output_flags(p, args)
    n, rounds, batches = (80, 1, 1) if args.quick else (args.n, args.rounds, args.batches)
    from feedline.sample import make_photo_folder
    work = Path(tempfile.mkdtemp(prefix="feedline-grid-bench-"))
    folder = str(work / "images")
    make_photo_folder(folder, n=n, classes=10, seed=0)
    source_bytes = sum(f.stat().st_size for f in Path(folder).rglob("*.jpg"))
    stores = {layout: work / f"{layout}.lmdb" for layout in LAYOUTS}
    pack_seconds: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    for _ in range(max(rounds - 1, 1)):
        for layout in LAYOUTS:
            pack_seconds[layout].append(pack_cli(folder, stores[layout], layout))
    # The decode alone first, with no loader alive: a loader's prefetching threads would
    # run beside it and be counted.
    jobs = {layout: decode_jobs(stores[layout], 300) for layout in LAYOUTS}
    decode_rates: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    for round_ in range(rounds + 1):    # round 0 warms up
        for layout in LAYOUTS:
            rate = decode_rate(*jobs[layout])
            if round_:
                decode_rates[layout].append(rate)
    loaders = {layout: loader_for(stores[layout]) for layout in LAYOUTS}
    streams = {layout: endless(loaders[layout]) for layout in LAYOUTS}
    loader_rates: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    for layout in LAYOUTS:      # warm-up: threads, buffers, page cache
        loader_rate(streams[layout], 2)
    for _ in range(rounds):
        for layout in LAYOUTS:
            loader_rates[layout].append(loader_rate(streams[layout], batches))
    for loader in loaders.values():
        loader.close()
    rows = []
    for layout in LAYOUTS:
        rows.append({"layout": layout, "loader_img_s": Spread.of(loader_rates[layout]).median,
                     "decode_img_s": Spread.of(decode_rates[layout]).median,
                     "pack_s": Spread.of(pack_seconds[layout]).median,
                     "size_mib": stores[layout].stat().st_size / 2**20,
                     "decoder": repr(loaders[layout].source.decoder)})
    grid, original = rows[1], rows[0]
    ratios = {"loader": ratio(grid["loader_img_s"], original["loader_img_s"]),
              "decode_one_thread": ratio(grid["decode_img_s"], original["decode_img_s"]),
              "pack_time": ratio(grid["pack_s"], original["pack_s"]),
              "size": ratio(grid["size_mib"], original["size_mib"])}
    # Rounds alternate, so each round's quotient compares neighbours in time: its median
    # is less moved by the load of a shared machine than the quotient of medians.
    paired = {kind: Spread.of([g / o for g, o in zip(rates["grid"], rates["original"])]).median
              for kind, rates in (("loader", loader_rates), ("decode_one_thread", decode_rates))}
    say(f"{n} photo-like JPEGs ({source_bytes / 2**20:.1f} MiB), {rounds} interleaved rounds")
    say(format_table(rows, [("layout", "layout"), ("loader img/s", "loader_img_s"),
                            ("decode img/s (1 thread)", "decode_img_s"), ("pack s (CLI)", "pack_s"),
                            ("store MiB", "size_mib")]))
    say("grid / original: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items() if v is not None))
    say("median of the rounds' quotients: " + ", ".join(f"{k} {v:.2f}x" for k, v in paired.items()))
    epoch = n / original["loader_img_s"]
    say(f"one loader epoch over these files on the original store: {epoch:.2f} s; "
        f"grid pack: {grid['pack_s']:.2f} s")
    targets = [target("grid / original FeedLoader img/s (median of the rounds' quotients)", paired["loader"], 1.25),
               target("grid pack (CLI) / one loader epoch on the original store", ratio(grid["pack_s"], epoch), 1.0,
                      at_least=False)]
    say(targets_table(targets, args.quick))
    path = write_results("grid", rows, params={"n": n, "rounds": rounds, "batches": batches, "size": 224,
                                               "batch_size": 64}, out=args.out, quick=args.quick, save=args.save,
                         targets=targets, ratios=ratios, paired_ratios=paired,
                         loader_epoch_s=epoch, source_mib=source_bytes / 2**20,
                         rates={"loader": loader_rates, "decode": decode_rates, "pack": pack_seconds})
    say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
