"""Grid store against original store: the same photos, the same loader settings, one run, on
the benchmark's photo-like JPEGs and on larger photos (1-3 MP).

    .venv/bin/python bench/grid.py [--sets photos,large] [--n 600] [--n-large 150] [--rounds 3]
                                   [--batches 12] [--batch-size 64] [--workers W] [--quick] [--save]

For each set of photos (`feedline sample`'s photos: ``photos`` at their ImageNet-like sizes,
``large`` at 1.2 to 3.1 megapixels), generated once, packed twice through the CLI,
`--layout original` and `--layout grid`, alternating (pack time and size). Then, in interleaved
rounds: FeedLoader on each store, RandomResizedCrop 224 + flip to float32, batch 64, decoder
"auto" (on the grid store a GridDecoder, chosen by the loader itself), plain and with the
augmentation recipe (RandAugment(2, 9) + RandomErasing(0.25) in the workers, timm's Mixup on
the batch); and one thread's `decode_into` with the loader's decoder, of the same
RandomResizedCrop boxes (the decode alone, before any loader starts). Each loader measurement
first drains the batches that loader buffered while the other was timed. Medians and their
quotients are printed; JSON goes to bench/results/grid.json with --save.
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
# 1.2 to 3.1 megapixels, landscape and portrait
LARGE_SIZES = [(1280, 960), (1600, 1200), (1920, 1080), (2048, 1536), (1200, 1600), (1536, 2048)]
SETS = {"photos": None, "large": LARGE_SIZES}   # None: feedline.sample's own sizes
KINDS = ("plain", "recipe")


def pack_cli(folder: str, out: Path, layout: str) -> float:
    """Seconds `feedline pack --layout LAYOUT` takes, end to end (interpreter start included)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "feedline", "pack", folder, str(out), "--layout", layout,
                    "--overwrite", "--quiet"], check=True, env=env, cwd=str(ROOT))
    return time.perf_counter() - t0


def loader_for(path: Path, kind: str, workers: int | str, batch_size: int, classes: int):
    from feedline import FeedLoader
    from feedline.core.config import TransformSpec
    from feedline.transforms import Mixup, RandAugment, RandomErasing
    spec = TransformSpec([RandAugment(2, 9), RandomErasing(0.25)], [Mixup(0.8, 1.0, num_classes=classes)]) \
        if kind == "recipe" else TransformSpec()
    return FeedLoader(str(path), batch_size=batch_size, shuffle=True, train=True, size=224, device="cpu", drop_last=True,
                      decoder="auto", num_workers=workers, transforms=spec)   # on the grid store a GridDecoder


def endless(loader):
    while True:
        yield from loader   # iterating again moves to the next epoch


DRAIN = 6   # untimed batches first: what a loader decoded ahead while the other one was timed


def loader_rate(batches, count: int, drain: int = DRAIN) -> float:
    for _ in range(drain):
        next(batches)
    t0, images = time.perf_counter(), 0
    for _ in range(count):
        images += len(next(batches)[1])
    return images / (time.perf_counter() - t0)


def decode_jobs(path: Path, n: int):
    """(decoder, [(bytes, box)]) for one thread's decode_into of RandomResizedCrop boxes."""
    import numpy as np
    from feedline import open_dataset
    from feedline.planning.augment import random_resized_crop, uniforms
    from feedline.decoders.base import Box
    from feedline.decoders.selection import per_image_decoder
    store = open_dataset(str(path))
    decoder = per_image_decoder("auto", store)   # the loader's choice: on the grid store a GridDecoder
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


def measure_set(name: str, work: Path, n: int, rounds: int, batches: int, workers: int | str,
                batch_size: int) -> dict:
    """Pack, decode and loader figures of one set of photos, both layouts."""
    from feedline.sample import make_photo_folder
    folder = str(work / name / "images")
    sizes = SETS[name]
    make_photo_folder(folder, n=n, classes=10, seed=0, **({"sizes": sizes} if sizes else {}))
    source_bytes = sum(f.stat().st_size for f in Path(folder).rglob("*.jpg"))
    stores = {layout: work / name / f"{layout}.lmdb" for layout in LAYOUTS}
    pack_seconds: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    for _ in range(max(rounds - 1, 1)):
        for layout in LAYOUTS:
            pack_seconds[layout].append(pack_cli(folder, stores[layout], layout))
    # The decode alone first, with no loader alive: a loader's prefetching workers would
    # run beside it and be counted.
    jobs = {layout: decode_jobs(stores[layout], 300) for layout in LAYOUTS}
    decode_rates: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    for round_ in range(rounds + 1):    # round 0 warms up
        for layout in LAYOUTS:
            rate = decode_rate(*jobs[layout])
            if round_:
                decode_rates[layout].append(rate)
    rates = {kind: {layout: [] for layout in LAYOUTS} for kind in KINDS}
    decoders = {}
    for kind in KINDS:   # one kind's loaders at a time: their workers share the cores
        loaders = {layout: loader_for(stores[layout], kind, workers, batch_size, 10) for layout in LAYOUTS}
        decoders.update({layout: repr(loader.source.decoder) for layout, loader in loaders.items()})
        streams = {layout: endless(loaders[layout]) for layout in LAYOUTS}
        try:
            for layout in LAYOUTS:      # warm-up: workers, buffers, page cache, index maps
                loader_rate(streams[layout], 2)
            for _ in range(rounds):
                for layout in LAYOUTS:
                    rates[kind][layout].append(loader_rate(streams[layout], batches))
        finally:
            for loader in loaders.values():
                loader.close()
    rows = [{"set": name, "layout": layout,
             "loader_img_s": Spread.of(rates["plain"][layout]).median,
             "recipe_img_s": Spread.of(rates["recipe"][layout]).median,
             "decode_img_s": Spread.of(decode_rates[layout]).median,
             "pack_s": Spread.of(pack_seconds[layout]).median,
             "size_mib": stores[layout].stat().st_size / 2**20, "decoder": decoders[layout]} for layout in LAYOUTS]
    original, grid = rows
    # Rounds alternate, so each round's quotient compares neighbours in time: its median
    # is less moved by the load of a shared machine than the quotient of medians.
    paired = {kind: Spread.of([g / o for g, o in zip(r["grid"], r["original"])]).median
              for kind, r in (("loader", rates["plain"]), ("recipe", rates["recipe"]),
                              ("decode_one_thread", decode_rates))}
    ratios = {"loader": ratio(grid["loader_img_s"], original["loader_img_s"]),
              "recipe": ratio(grid["recipe_img_s"], original["recipe_img_s"]),
              "decode_one_thread": ratio(grid["decode_img_s"], original["decode_img_s"]),
              "pack_time": ratio(grid["pack_s"], original["pack_s"]),
              "size": ratio(grid["size_mib"], original["size_mib"])}
    return {"rows": rows, "paired": paired, "ratios": ratios, "n": n, "source_mib": source_bytes / 2**20,
            "epoch_s": n / original["loader_img_s"],
            "rates": {"loader": rates["plain"], "recipe": rates["recipe"], "decode": decode_rates,
                      "pack": pack_seconds}}


def main(argv: list[str] | None = None) -> int:
    from bench.args import check_output_flags, output_arguments
    p = argparse.ArgumentParser(prog="bench/grid.py", description=__doc__.splitlines()[0])
    p.add_argument("--sets", default="photos,large", help="photo sets, comma-separated: photos, large")
    p.add_argument("--n", type=int, default=600, help="photo-like JPEGs generated (default 600)")
    p.add_argument("--n-large", type=int, default=150, help="1-3 MP JPEGs generated (default 150)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--batches", type=int, default=12, help="timed batches per loader and round")
    p.add_argument("--batch-size", type=int, default=64, help="default 64 (8 with --quick)")
    p.add_argument("--workers", default="auto", type=lambda v: v if v == "auto" else int(v),
                   help="loader workers (default auto: the loader's own choice, a worker per usable core)")
    p.add_argument("--quick", action="store_true", help="a tiny run, to check the script works")
    output_arguments(p, "grid")
    args = p.parse_args(argv)
    check_output_flags(p, args)
    names = [s for s in args.sets.split(",") if s]
    unknown = [s for s in names if s not in SETS]
    if unknown or not names:
        p.error(f"--sets: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(SETS)}")
    rounds, batches = (1, 1) if args.quick else (args.rounds, args.batches)
    batch_size = 8 if args.quick else args.batch_size
    counts = {"photos": 40 if args.quick else args.n, "large": 12 if args.quick else args.n_large}
    work = Path(tempfile.mkdtemp(prefix="feedline-grid-bench-"))
    found = {name: measure_set(name, work, counts[name], rounds, batches, args.workers, batch_size)
             for name in names}
    targets = []
    for name, f in found.items():
        original, grid = f["rows"]
        say(f"{name}: {f['n']} JPEGs ({f['source_mib']:.1f} MiB), {rounds} interleaved rounds")
        say(format_table(f["rows"], [("layout", "layout"), ("loader img/s", "loader_img_s"),
                                     ("recipe img/s", "recipe_img_s"), ("decode img/s (1 thread)", "decode_img_s"),
                                     ("pack s (CLI)", "pack_s"), ("store MiB", "size_mib")]))
        say("grid / original: " + ", ".join(f"{k} {v:.2f}x" for k, v in f["ratios"].items() if v is not None))
        say("median of the rounds' quotients: " + ", ".join(f"{k} {v:.2f}x" for k, v in f["paired"].items()))
        say(f"one loader epoch over these files on the original store: {f['epoch_s']:.2f} s; "
            f"grid pack: {grid['pack_s']:.2f} s")
        targets += [target(f"{name}: grid / original FeedLoader img/s (median of the rounds' quotients)",
                           f["paired"]["loader"], 1.25),
                    target(f"{name}: grid / original FeedLoader img/s with the recipe (median of the rounds' "
                           f"quotients)", f["paired"]["recipe"], 1.0),
                    target(f"{name}: grid pack (CLI) / one loader epoch on the original store",
                           ratio(grid["pack_s"], f["epoch_s"]), 1.0, at_least=False)]
    say(targets_table(targets, args.quick))
    rows = [row for f in found.values() for row in f["rows"]]
    path = write_results("grid", rows, params={"sets": names, "n": counts, "rounds": rounds, "batches": batches,
                                               "size": 224, "batch_size": batch_size, "workers": args.workers},
                         out=args.out, quick=args.quick, save=args.save, targets=targets,
                         sets={name: {k: v for k, v in f.items() if k != "rows"} for name, f in found.items()})
    say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
