"""Data bigger than RAM: quasi-random against random order, epochs that start with the
store's pages dropped from the page cache.

    python bench/cold_cache.py [DATA] [--n 32000] [--classes 100] [--formats lmdb,hdf5]
                               [--repeats 2] [--size 224] [--quick] [--cache-dir DIR] [--out PATH]

DATA is a packed file; by default ``--n`` photo-like JPEGs (feedline.sample, ~80 KiB,
mostly 500x375, ``--classes`` classes) are generated into CACHE/cold-cache and packed
there (LMDB and HDF5), class by class as `feedline pack` orders a folder.

"Cold": before the epoch the store is closed (a mapped page cannot be dropped), its pages
dropped (``posix_fadvise(POSIX_FADV_DONTNEED)``) and the share still resident checked with
``mincore``; the store is opened afresh. "Warm": every byte read once first. Each epoch is
a full epoch of FeedLoader (batch 64, ``--size`` random-resized crops, 2 threads):

- decode rows: the loader as it is (decoder "auto"); on this 2-core machine decoding is
  the bottleneck, so they show what the order costs a CPU-bound loader;
- read rows: the same loader with a decoder that does no work (every record is still
  read and checksummed) and 16x16 outputs (so that normalizing does not cost either):
  the store's read rate in that order, what a loader whose decoding keeps up (a GPU
  decoder, many cores) would see.

Orders: random; quasi-random with the loader's block and window (16 records, 256 blocks);
quasi-random with ``page_aware_sizes`` (blocks of ~2 MiB). Rounds are interleaved; rates
are medians. ``read_mib`` is what the process read from storage (/proc/self/io) over the
store's size. Targets, cold quasi-random: >= 2x cold random, >= 0.8x warm quasi-random.

Also, from the order alone, the class mix of batches of a store packed class by class
(distinct classes per batch): this data set, and an ImageNet-like one (1,281,167 records,
1,000 classes, ~110 KiB each). Writes bench/results/local/cold_cache.json
(bench/results/cold_cache.json with --save).
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench.cold_pages import NullDecoder, drop, read_bytes, resident_fraction, warm  # noqa: E402
from bench.args import check_output_flags, output_arguments  # noqa: E402
from bench.common import format_table, ratio, say, target, targets_table, write_results  # noqa: E402
from bench.data import cache_root  # noqa: E402
from bench.machine import machine_info, machine_line  # noqa: E402

QUICK = {"n": 600, "classes": 6, "repeats": 1, "size": 64}
BATCH, THREADS = 64, 2
READ_SIZE = 16
TIMES_RANDOM, SHARE_OF_WARM = 2.0, 0.8


def prepare(data: str | None, n: int, classes: int, formats: list[str], cache_dir) -> dict[str, str]:
    """{format: packed file}: DATA, or the generated set packed in each format (once)."""
    if data is not None:
        from feedline.stores import open_dataset
        with open_dataset(data) as store:
            return {store.kind: data}
    from converters import pack
    from feedline.sample import make_photo_folder
    root = cache_root(cache_dir) / "cold-cache" / f"photos-{n}-{classes}"
    images = root / "images"
    if not images.is_dir():
        say(f"generating {n} photo-like JPEGs into {images} (once; ~20 ms each)")
        tmp = root / ".images-tmp"
        make_photo_folder(str(tmp), n=n, classes=classes, seed=0)
        os.rename(tmp, images)
    packed = {}
    for fmt in formats:
        out = root / f"train.{'lmdb' if fmt == 'lmdb' else 'h5'}"
        if not out.is_file():
            say(f"packing {images} into {out} (once)")
            pack(str(images), str(out), progress=False)
        packed[fmt] = str(out)
    return packed


class Setting:
    """One row's way of running an epoch: an order (with its block and window) and a decoder."""

    def __init__(self, name: str, order: str, block: int, window: int, reading_only: bool):
        self.name, self.order, self.block, self.window, self.reading_only = name, order, block, window, reading_only


def settings(mean_bytes: float, decode: bool) -> list[Setting]:
    from feedline.planning.plan import EpochPlan
    from feedline.sources.readahead import page_aware_sizes
    block, window = EpochPlan.block, EpochPlan.window   # the loader's (the dataclass defaults)
    aware = page_aware_sizes(mean_bytes)
    found = []
    for reading_only in ((False, True) if decode else (True,)):
        kind = "read" if reading_only else "decode"
        found += [Setting(f"{kind}: random", "random", block, window, reading_only),
                  Setting(f"{kind}: quasi-random {block}x{window}", "quasi-random", block, window, reading_only)]
        if reading_only and aware != (block, window):
            found.append(Setting(f"{kind}: quasi-random {aware[0]}x{aware[1]}", "quasi-random", *aware, reading_only))
    return found


def epoch(path: str, setting: Setting, cold: bool, size: int) -> dict:
    """One full epoch from a freshly opened store; images/s and what was read."""
    from feedline import FeedLoader
    from feedline.core.choices import Order
    from feedline.planning.plan import EpochPlan
    from feedline.core.stats import LoaderStats
    from feedline.stores import open_dataset
    with open_dataset(path) as probe:
        files = probe.files()
    gc.collect()
    (drop if cold else warm)(files)
    resident = resident_fraction(files)
    read0 = read_bytes()
    store = open_dataset(path)
    decoder = NullDecoder() if setting.reading_only else "auto"
    loader = FeedLoader(store, batch_size=BATCH, shuffle=True, train=True, order=setting.order, size=size, num_workers=THREADS,
                        seed=1, decoder=decoder)
    c = loader.config
    plan = EpochPlan(c.augment, c.seed, 0, Order.parse(setting.order, "order"), BATCH, False,
                     block=setting.block, window=setting.window)
    images = 0
    t0 = time.perf_counter()
    batches = loader.source.run(plan, 0, LoaderStats())   # the loader's source, this row's block and window
    try:
        for _, labels in batches:
            images += len(labels)
    finally:
        batches.close()
    seconds = time.perf_counter() - t0
    loader.close()
    store.close()
    del loader, store
    gc.collect()
    return {"images": images, "seconds": seconds, "rate": images / seconds, "resident_before": resident,
            "read_bytes": read_bytes() - read0}


def measure(path: str, rows_settings: list[Setting], repeats: int, size: int, fmt: str) -> list[dict]:
    runs: dict[tuple[str, bool], list[dict]] = {}
    for round_ in range(repeats):
        for setting in rows_settings:
            for cold in (False, True):
                result = epoch(path, setting, cold, READ_SIZE if setting.reading_only else size)
                runs.setdefault((setting.name, cold), []).append(result)
                say(f"  {fmt} {setting.name}, {'cold' if cold else 'warm'}: {result['rate']:,.0f} img/s "
                    f"(resident before {result['resident_before']:.0%}, read {result['read_bytes'] / 2**20:,.0f} MiB)")
    size_bytes = sum(os.path.getsize(f) for f in [path])
    rows = []
    for (name, cold), results in runs.items():
        rows.append({"format": fmt, "setting": name, "cache": "cold" if cold else "warm",
                     "images_per_s": statistics.median(r["rate"] for r in results),
                     "min": min(r["rate"] for r in results), "max": max(r["rate"] for r in results),
                     "rounds": len(results), "resident_before": max(r["resident_before"] for r in results),
                     "read_of_store": statistics.median(r["read_bytes"] for r in results) / size_bytes,
                     "runs": results})
    return rows


def class_mix(labels: np.ndarray, block: int, window: int, batch: int = 256, seed: int = 0) -> dict:
    """Distinct classes per batch in random and quasi-random order over ``labels``."""
    from feedline.planning.order import epoch_order, quasi_random_order
    batch = min(batch, len(labels))   # a data set smaller than a batch: one batch
    n = len(labels) - len(labels) % batch

    def distinct(order):
        rows = np.sort(labels[order[:n]].reshape(-1, batch), axis=1)
        return float(np.mean(1 + np.count_nonzero(np.diff(rows, axis=1), axis=1)))

    return {"records": len(labels), "classes": int(labels.max()) + 1, "block": block, "window": window,
            "batch": batch, "random": distinct(epoch_order(len(labels), seed, 0, True)),
            "quasi_random": distinct(quasi_random_order(len(labels), seed, 0, block, window))}


def mix_rows(store_labels: np.ndarray, mean_bytes: float) -> list[dict]:
    from feedline.planning.plan import EpochPlan
    from feedline.sources.readahead import page_aware_sizes
    imagenet = np.repeat(np.arange(1000), 1282)[:1_281_167]
    rows = []
    for name, labels, mean in (("this data set", store_labels, mean_bytes), ("ImageNet-like", imagenet, 110 << 10)):
        for block, window in ((EpochPlan.block, EpochPlan.window), page_aware_sizes(mean)):
            rows.append({"data": name, **class_mix(labels, block, window)})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/cold_cache.py", description=__doc__.split("\n\n")[0])
    p.add_argument("data", nargs="?", help="a packed .lmdb/.h5 file (default: generated and packed)")
    p.add_argument("--n", type=int, help="images to generate (default 32000)")
    p.add_argument("--classes", type=int, help="classes to generate (default 100)")
    p.add_argument("--formats", default="lmdb,hdf5", help="formats to pack and measure (default both)")
    p.add_argument("--decode-formats", default="lmdb", help="formats with decode rows too (default lmdb)")
    p.add_argument("--repeats", type=int, help="interleaved rounds (default 2)")
    p.add_argument("--size", type=int, help="crop size of the decode rows (default 224; read rows: 16)")
    p.add_argument("--quick", action="store_true", help=f"a tiny run for tests: {QUICK}")
    p.add_argument("--cache-dir", help="where the data is kept (default .cache/ in the repository)")
    output_arguments(p, "cold_cache")
    args = p.parse_args(argv)
    check_output_flags(p, args)
    quick = QUICK if args.quick else {}
    n, classes = args.n or quick.get("n", 32000), args.classes or quick.get("classes", 100)
    repeats, size = args.repeats or quick.get("repeats", 2), args.size or quick.get("size", 224)
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]

    machine = machine_info()
    say(machine_line(machine) + f"; load average {os.getloadavg()[0]:.1f}")
    packed = prepare(args.data, n, classes, formats, args.cache_dir)
    from feedline.stores import open_dataset
    rows, mix = [], []
    for fmt, path in packed.items():
        with open_dataset(path) as store:
            mean_bytes = os.path.getsize(path) / len(store)
            labels = np.array(store.labels)
        say(f"{fmt}: {path}: {len(labels):,} records, {os.path.getsize(path) / 2**30:.2f} GiB, "
            f"{mean_bytes / 1024:.0f} KiB per record")
        rows += measure(path, settings(mean_bytes, fmt in args.decode_formats), repeats, size, fmt)
        if not mix:
            mix = mix_rows(labels, mean_bytes)
    say()
    say(format_table(rows, [("format", "format"), ("setting", "setting"), ("cache", "cache"),
                            ("img/s", "images_per_s"), ("min", "min"), ("max", "max"), ("rounds", "rounds"),
                            ("resident before", "resident_before"), ("read / store", "read_of_store")]))
    say()
    say(format_table(mix, [("data", "data"), ("records", "records"), ("classes", "classes"), ("block", "block"),
                           ("window", "window"), ("classes/batch random", "random"),
                           ("classes/batch quasi", "quasi_random")]))
    say()
    targets = targets_of(rows)
    say(targets_table(targets, args.quick))
    path = write_results("cold_cache", rows, {"data": args.data, "n": n, "classes": classes, "formats": formats,
                                              "repeats": repeats, "size": size, "batch": BATCH, "threads": THREADS,
                                              "load_average": os.getloadavg()},
                         out=args.out, quick=args.quick, save=args.save, machine=machine, targets=targets, class_mix=mix)
    say(f"wrote {path}")
    return 0


def targets_of(rows: list[dict]) -> list[dict]:
    def rate(fmt, setting, cache):
        return next((r["images_per_s"] for r in rows if (r["format"], r["setting"], r["cache"]) == (fmt, setting, cache)),
                    None)

    found = []
    for fmt in sorted({r["format"] for r in rows}):
        for kind in ("decode", "read"):
            quasi = [r["setting"] for r in rows if r["format"] == fmt and r["setting"].startswith(f"{kind}: quasi")]
            for setting in dict.fromkeys(quasi):
                cold = rate(fmt, setting, "cold")
                found += [target(f"{fmt} {setting}, cold / random cold", ratio(cold, rate(fmt, f"{kind}: random", "cold")),
                                 TIMES_RANDOM),
                          target(f"{fmt} {setting}, cold / warm", ratio(cold, rate(fmt, setting, "warm")), SHARE_OF_WARM)]
    return found


if __name__ == "__main__":
    sys.exit(main())
