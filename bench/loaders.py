"""Loader benchmark: FeedLoader (its defaults, decoder="auto") against a torch DataLoader
decoding with PIL, a DALI CPU pipeline and the decode floor, side by side in one run,
on the same images, with the same work and the same number of cores.

    python bench/loaders.py [DATA] [--quick] [--threads T] [--repeats R] [--batches N] [--decoders NAMES]

The work per image: random-resized crop 224 (scale 0.08-1, ratio 3/4-4/3), flip with
p=0.5, normalize to float32 N x 3 x 224 x 224, drop_last. Each loader is an endless
stream of batches, started and warmed up once. A measurement drains a few batches
untimed (what the loader buffered while idle), then times ``batches`` batches,
counting the images delivered. Rounds are interleaved across loaders in a rotating
order, so noise on a shared machine hits all alike; each row shows the median rate.
The x columns are quotients of the printed medians. The decode floor (bench.floor)
is measured in the same rounds. FeedLoader's resident memory over epochs is measured
in a process of its own. Writes bench/results/local/loaders.json and .png
(bench/results/ with --save, bench/results/quick/ with --quick).
"""
from __future__ import annotations

import dataclasses
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # `python bench/loaders.py`: the repository root, not bench/, on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench import floor, streams  # noqa: E402
from bench.args import names, run_main  # noqa: E402
from bench.chart import save_bar_chart  # noqa: E402
from bench.common import (MeasurementError, Spread, format_table, ratio, say, target, targets_table,  # noqa: E402
                          unjudged, write_results)
from bench.data import cache_root, prepare_data, read_encoded  # noqa: E402
from bench.machine import machine_info, machine_line  # noqa: E402
from feedline.core.choices import Engine  # noqa: E402
from feedline.core.config import usable_cores  # noqa: E402

log = logging.getLogger(__name__)

NAME = "loaders"
FEEDLINE, DATALOADER, DALI_CPU, FLOOR = "feedline", "torch-dataloader-pil", "dali-cpu", "decode-floor"
POOL = "decode-pool"   # the floor's region decode over a pool of all threads, for reference
CHECKED = "feedline-checked"   # FeedLoader on the same files packed with --check decode: region decode
GRID = "feedline-grid"         # FeedLoader on the same files packed with --layout grid: spliced crops
GRID_OVER_ORIGINAL = 1.25      # issue 24: the grid store over the original store, same loader settings
# (denominator row, ratio column, minimum of FeedLoader's default over it), set for 2 cores
TARGETS = ((DATALOADER, "x_dataloader", 2.5), (DALI_CPU, "x_dali_cpu", 1.8), (FLOOR, "x_floor", 0.9))
FFCV_SAME, FFCV_OWN = "ffcv-same-jpeg", "ffcv-reencoded"
FFCV_TARGETS = ((FFCV_SAME, 1.8), (FFCV_OWN, 1.3))   # --ffcv: FeedLoader's default over FFCV 1.0.2
RSS_GROWTH_LIMIT_PCT = 2.0
ENGINES = tuple(e.value for e in Engine if e is not Engine.AUTO)   # --decoders may name these too
WORK = "random-resized crop 224 (scale 0.08-1, ratio 3/4-4/3) + flip p=0.5 + normalize to float32, drop_last"


@dataclass(frozen=True)
class LoaderBenchOptions:
    data: str | None = None     # packed file or image folder; None: generated photos
    n: int = 2000               # images generated without DATA
    batch_size: int = 64
    batches: int | None = None  # timed batches per measurement; None: max(20, 3 x threads)
    repeats: int = 3
    warmup: int = 8             # batches consumed once, after a loader starts
    drain: int | None = None    # untimed batches before each measurement; None: 2 x threads + 2
    threads: int | None = None  # workers / threads of every loader; None: the usable cores
    device: str | None = None   # FeedLoader's device; None: cuda when available, else cpu
    decoders: tuple[str, ...] = ()   # more FeedLoader rows, one per decoder name
    ffcv: bool = False          # also FFCV 1.0.2 (bench/ffcv_baseline.py), when installed
    epochs_rss: int = 5         # FeedLoader epochs for the memory check; 0 skips it
    floor_images: int = 200     # images of each decode-floor pass
    out: str | None = None
    cache_dir: str | None = None
    chart: bool = True
    only: tuple[str, ...] | None = None   # loader rows to run; None: all (the floor always runs)
    quick: bool = False         # a tiny run: targets not judged, written under bench/results/quick/
    save: bool = False          # write bench/results/loaders.json, the committed results

    def __post_init__(self):
        for name in ("n", "batch_size", "batches", "repeats", "floor_images"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0 or self.epochs_rss < 0 or (self.drain is not None and self.drain < 0):
            raise ValueError("--warmup, --drain and --epochs-rss must be >= 0")


# The drain keeps its default: fewer untimed batches than a loader buffers would time
# batches decoded before the clock started (a FeedLoader at hundreds of thousands of img/s).
QUICK = {"n": 32, "batch_size": 8, "batches": 2, "repeats": 1, "warmup": 1, "epochs_rss": 2, "floor_images": 8}
# A loader decoding on the CPU cannot beat the decode floor (its best decoder on every core,
# nothing else to do) by this much: such a rate counts images decoded before the clock started.
IMPOSSIBLE_OVER_FLOOR = 4.0
GPU_DECODERS = ("gpu", "dali")   # --decoders rows that may decode on a GPU: no CPU bound


def run_loader_bench(options: LoaderBenchOptions) -> dict:
    """Run the benchmark, print the tables, write the JSON (and PNG); returns the JSON object."""
    import torch
    threads = options.threads or usable_cores()
    device = options.device or ("cuda" if torch.cuda.is_available() else "cpu")
    drain = options.drain if options.drain is not None else 2 * threads + 2
    batches = options.batches or max(20, 3 * threads)
    data = prepare_data(options.data, options.n, cache_dir=options.cache_dir)
    machine = machine_info()
    say(f"loaders: {data.images} images from {data.source}; batch {options.batch_size}, "
        f"{threads} threads/workers, device {device}")
    say(f"machine: {machine_line(machine)}")

    running, reasons, descriptions = _start_streams(options, data, threads, device)
    floor_images = read_encoded(data, options.floor_images)
    boxes = floor.crop_boxes(floor_images)
    region_decoders, floor_reasons = floor.open_region_decoders()
    pools = {f"{POOL}:{name}": floor.RegionDecodePool(name, threads) for name in region_decoders}
    measured: dict[str, list[dict]] = {name: [] for name in running}
    passes: dict[str, list[floor.FloorMeasurement]] = {name: [] for name in [*region_decoders, *pools]}
    for r in range(options.repeats):
        order = [*running, *region_decoders, *pools]
        for name in order[r % len(order):] + order[:r % len(order)]:
            if name in running:
                measured[name].append(streams.measure(running[name].batches, batches, drain, device))
            elif name in pools:
                passes[name].append(pools[name].time(floor_images, boxes))
            else:
                passes[name].append(floor.time_region_decode(name, region_decoders[name], floor_images, boxes))
        say(f"  round {r + 1}/{options.repeats} done")
    for pool in pools.values():
        pool.close()
    stats = {name: stream.stats() for name, stream in running.items()}
    for stream in running.values():
        stream.close()

    rows = [_loader_row(name, descriptions[name], measured.get(name), reasons.get(name), threads, device,
                        options.batch_size, batches, stats.get(name)) for name in descriptions]
    rows += _floor_rows(passes, region_decoders, floor_reasons, threads)
    _add_ratios(rows)
    check_possible(rows)
    rss = _rss(options, data, threads, device)
    targets = unjudged(_targets(rows, rss)) if options.quick else _targets(rows, rss)
    say("")
    say(format_table(rows, [("loader", "name"), ("img/s", "images_per_s"), ("min", "images_per_s_min"),
                            ("max", "images_per_s_max"), ("xDataLoader", "x_dataloader"),
                            ("xDALI-CPU", "x_dali_cpu"), ("xfloor", "x_floor"), ("note", "reason")]))
    say(f"img/s: median of {options.repeats} interleaved rounds; x columns: this row's img/s over that row's, "
        f"as printed. Floor: {next(r for r in rows if r['name'] == FLOOR)['description']}.")
    say("")
    say(targets_table(targets, options.quick))
    if threads != 2 and not options.quick:
        say(f"(the targets are set for 2 cores; this run used {threads})")
    if rss.get("rss_mib"):
        say(f"FeedLoader RSS after each epoch (MiB): {', '.join(f'{v:.0f}' for v in rss['rss_mib'])}; "
            f"growth {rss['growth_pct']:+.2f}%")
    params = dataclasses.asdict(options) | {"threads": threads, "device": device, "drain": drain, "batches": batches,
                                            "images_per_measurement": batches * options.batch_size,
                                            "data": data.to_dict(), "work": WORK}
    path = write_results(NAME, rows, params, options.out, machine, quick=options.quick, save=options.save,
                         targets=targets, rss=rss)
    say(f"wrote {path}")
    if options.chart:
        chart = save_bar_chart(path.with_suffix(".png"), [r["name"] for r in rows],
                               {"images/s": [r["images_per_s"] for r in rows]},
                               f"Training input pipeline, batch {options.batch_size}, {threads} cores, {device} "
                               f"({machine['cpu']})", "images/s (higher is better)")
        if chart:
            say(f"wrote {chart}")
    return {"path": str(path), "params": params, "results": rows, "targets": targets, "rss": rss,
            "machine": machine}


def _start_streams(options, data, threads: int, device: str):
    """Name -> LoaderStream for each loader that starts; name -> reason for the others;
    name -> description for all. The DataLoader goes first: its workers fork before any
    other loader starts threads."""
    from bench import baselines
    batch = options.batch_size
    makers = {
        DATALOADER: (f"torch DataLoader, {threads} workers: PIL decode, RandomResizedCrop + flip + normalize "
                     "written with PIL and torch",
                     lambda: baselines.dataloader_stream(str(data.folder), batch, threads, device)),
        DALI_CPU: ("DALI CPU pipeline: readers.file -> decoders.image_random_crop -> resize -> "
                   "crop_mirror_normalize", lambda: baselines.dali_cpu_stream(str(data.folder), batch, threads, device)),
        FEEDLINE: (f"FeedLoader(decoder='auto', device={device!r}), {threads} workers",
                   lambda: baselines.feedloader_stream(str(data.packed), batch, threads, device)),
        CHECKED: (f"FeedLoader(decoder='auto', device={device!r}), {threads} workers, on the same files packed "
                  "with --check decode (every record proven to decode: only crop regions are decoded)",
                  lambda: baselines.feedloader_stream(str(_checked_store(data)), batch, threads, device)),
        GRID: (f"FeedLoader(decoder='auto', device={device!r}), {threads} workers, on the same files packed "
               "with --layout grid (a restart marker after every MCU: each crop's MCUs spliced and decoded)",
               lambda: baselines.feedloader_stream(str(_grid_store(data)), batch, threads, device)),
    }
    for name in options.decoders:   # a decoder's name, or an engine's (dali, gpu, threads)
        engine, decoder = (name, "auto") if name in ENGINES else ("auto", name)
        makers[f"feedline-{name}"] = (
            f"FeedLoader(engine={engine!r}, decoder={decoder!r}, device={device!r}), {threads} threads",
            lambda engine=engine, decoder=decoder: baselines.feedloader_stream(str(data.packed), batch, threads,
                                                                               device, decoder, engine=engine))
    if options.ffcv:
        from bench.ffcv_baseline import VARIANTS
        for name in (FFCV_SAME, FFCV_OWN):
            variant = name.removeprefix("ffcv-")
            makers[name] = (f"FFCV 1.0.2 Loader, {threads} workers, .beton of {VARIANTS[variant]}",
                            lambda variant=variant: _ffcv(data, options, variant, threads, device))
    running, reasons, descriptions = {}, {}, {}
    for name, (description, make) in makers.items():
        if options.only is not None and name not in options.only:
            continue
        descriptions[name] = description
        try:
            running[name] = streams.start(name, make, batch, options.warmup)
        except Exception as exc:  # not installed, BackendUnavailable and the like: reported, not fatal
            log.debug("loader %s failed to start", name, exc_info=True)
            reasons[name] = (f"not installed: {exc}" if isinstance(exc, ImportError)
                             else f"{type(exc).__name__}: {exc}")
    return running, reasons, descriptions


def _checked_store(data) -> Path:
    """The bench's images packed with ``--check decode``, next to its packed file (once)."""
    out = data.packed.with_name(data.packed.stem + "-checked" + data.packed.suffix)
    if not out.exists():
        from converters import pack
        pack(str(data.folder), str(out), check="decode", progress=False)
    return out


def _grid_store(data) -> Path:
    """The bench's images packed with ``--layout grid``, next to its packed file (once)."""
    out = data.packed.with_name(data.packed.stem + "-grid" + data.packed.suffix)
    if not out.exists():
        from converters import pack
        pack(str(data.folder), str(out), layout="grid", progress=False)
    return out


def _ffcv(data, options, variant: str, threads: int, device: str):
    from bench.ffcv_baseline import ffcv_stream
    return ffcv_stream(data.packed, cache_root(options.cache_dir), variant, options.batch_size, threads, device)


def _rates(row: dict, rates: list[float]) -> None:
    spread = Spread.of(rates)
    row.update(images_per_s=spread.median, images_per_s_min=spread.min, images_per_s_max=spread.max)


def _loader_row(name, description, measurements, reason, threads, device, batch_size, batches, stats) -> dict:
    row = {"name": name, "description": description, "threads": threads,
           "device": "cpu" if name == DALI_CPU else device, "batch_size": batch_size,
           "images_per_measurement": batches * batch_size, "available": reason is None, "reason": reason,
           "images_per_s": None, "images_per_s_min": None, "images_per_s_max": None,
           "measurements": measurements or [], "loader_stats": stats}
    if measurements:
        _rates(row, [m["images"] / m["seconds"] for m in measurements])
    return row


def _floor_rows(passes: dict, region_decoders: dict, reasons: dict, threads: int) -> list[dict]:
    """The decode floor, and (for reference) its best region decoder over a thread pool."""
    rows = [floor.floor_row(FLOOR, {n: passes[n] for n in region_decoders}, reasons, threads)]
    if rows[0]["available"]:
        best = rows[0]["decoder"]
        rows.append(floor.pool_row(POOL, best, passes[f"{POOL}:{best}"], threads))
    for row in rows:
        row.update(images_per_s=None, images_per_s_min=None, images_per_s_max=None)
        if row.get("rates"):
            _rates(row, row.pop("rates"))
    return rows


def _add_ratios(rows: list[dict]) -> None:
    """x columns: each row's median rate over the reference row's median rate."""
    speed = {row["name"]: row["images_per_s"] for row in rows}
    for row in rows:
        for other, column, _ in TARGETS:
            row[column] = ratio(row["images_per_s"], speed.get(other))


def _rss(options, data, threads: int, device: str) -> dict:
    if options.epochs_rss == 0 or (options.only is not None and FEEDLINE not in options.only):
        return {"skipped": True}
    from bench.rss import measure_rss_in_subprocess
    say(f"measuring FeedLoader's resident memory over {options.epochs_rss} epochs ...")
    try:
        return measure_rss_in_subprocess(str(data.packed), options.epochs_rss, options.batch_size, threads,
                                         "auto", device)
    except Exception as exc:
        log.warning("RSS measurement failed: %s", exc)
        return {"error": str(exc)}


class ImpossibleRate(MeasurementError):
    """A measured rate that no decoding on this machine can reach: a measurement error."""


def check_possible(rows: list[dict]) -> None:
    """ImpossibleRate when a loader decoding on the CPU delivered images faster than
    IMPOSSIBLE_OVER_FLOOR x the decode floor: more images than it can have decoded in the
    time measured, i.e. images buffered before the clock started."""
    floor_rate = next((r["images_per_s"] for r in rows if r["name"] == FLOOR), None)
    if not floor_rate:
        return
    for row in rows:
        rate = row["images_per_s"]
        on_gpu = any(row["name"] == f"{FEEDLINE}-{d}" for d in GPU_DECODERS)
        if row["name"] in (FLOOR, POOL) or on_gpu or rate is None or rate <= IMPOSSIBLE_OVER_FLOOR * floor_rate:
            continue
        raise ImpossibleRate(
            f"{row['name']}: {rate:,.0f} images/s is {rate / floor_rate:,.0f}x the decode floor ({floor_rate:,.0f} "
            f"images/s on these cores): more images than it can have decoded while timed, so they were "
            f"buffered before the clock started. Time more batches (--batches) or drain more (--drain); "
            f"nothing written")


def _targets(rows: list[dict], rss: dict) -> list[dict]:
    """FeedLoader's default against each target ratio, and the memory check."""
    row = next((r for r in rows if r["name"] == FEEDLINE), None)
    out = [target(f"{FEEDLINE} / {other}", row[column] if row else None, needed) for other, column, needed in TARGETS]
    speed = {r["name"]: r["images_per_s"] for r in rows}
    for other, needed in FFCV_TARGETS:
        if other in speed:   # FeedLoader's printed img/s over FFCV's
            out.append(target(f"{FEEDLINE} / {other}", ratio(row and row["images_per_s"], speed[other]), needed))
    grid = next((r for r in rows if r["name"] == GRID), None)
    if grid is not None and row is not None:   # same files, same settings: --layout grid over the default pack
        out.append(target(f"{GRID} / {FEEDLINE}", ratio(grid["images_per_s"], row["images_per_s"]),
                          GRID_OVER_ORIGINAL))
    if not rss.get("skipped"):
        out.append(target(f"{FEEDLINE} RSS growth over {rss.get('epochs', '?')} epochs", rss.get("growth_pct"),
                          RSS_GROWTH_LIMIT_PCT, at_least=False, unit="%"))
    return out


def add_arguments(p) -> None:
    p.add_argument("--n", type=int, metavar="N", help="images generated without DATA (default 2000)")
    p.add_argument("--batches", type=int, metavar="N", help="timed batches per measurement "
                                                           "(default max(20, 3 x threads))")
    p.add_argument("--batch-size", type=int, metavar="B", help="batch size (default 64)")
    p.add_argument("--warmup", type=int, metavar="W", help="batches consumed when a loader starts (default 8)")
    p.add_argument("--drain", type=int, metavar="D", help="untimed batches before each measurement "
                                                          "(default 2 x threads + 2)")
    p.add_argument("--device", help="FeedLoader's device (default: cuda when available, else cpu)")
    p.add_argument("--decoders", type=names, metavar="NAMES",
                   help="also FeedLoader with each of these decoders (comma-separated; registered names, yours "
                        "included, or the engines dali, gpu, threads), one row each")
    p.add_argument("--ffcv", action="store_true", default=None,
                   help="also FFCV 1.0.2 on the same JPEG bytes and on its own re-encoded .beton (when installed)")
    p.add_argument("--epochs-rss", type=int, metavar="E", help="FeedLoader epochs of the memory check "
                                                               "(default 5; 0 skips it)")
    p.add_argument("--floor-images", type=int, metavar="N", help="images of each decode-floor pass (default 200)")


def main(argv: list[str] | None = None) -> int:
    return run_main("bench/loaders.py", __doc__.split("\n\n")[0], LoaderBenchOptions, QUICK, add_arguments,
                    run_loader_bench, argv)


if __name__ == "__main__":
    sys.exit(main())
