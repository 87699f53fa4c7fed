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
in a process of its own. Writes bench/results/loaders.json and .png.
"""
from __future__ import annotations

import dataclasses
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # `python bench/loaders.py`: the repository root, not bench/, on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench import floor  # noqa: E402
from bench.args import names, run_main  # noqa: E402
from bench.chart import save_bar_chart  # noqa: E402
from bench.common import Spread, format_table, ratio, say, target, targets_table, write_results  # noqa: E402
from bench.data import prepare_data, read_encoded  # noqa: E402
from bench.machine import machine_info, machine_line  # noqa: E402
from feedline.config import usable_cores  # noqa: E402

log = logging.getLogger(__name__)

NAME = "loaders"
FEEDLINE, DATALOADER, DALI_CPU, FLOOR = "feedline", "torch-dataloader-pil", "dali-cpu", "decode-floor"
# (denominator row, ratio column, minimum of FeedLoader's default over it), set for 2 cores
TARGETS = ((DATALOADER, "x_dataloader", 2.5), (DALI_CPU, "x_dali_cpu", 1.8), (FLOOR, "x_floor", 0.9))
RSS_GROWTH_LIMIT_PCT = 2.0
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
    epochs_rss: int = 5         # FeedLoader epochs for the memory check; 0 skips it
    floor_images: int = 200     # images of each decode-floor pass
    out: str | None = None
    cache_dir: str | None = None
    chart: bool = True
    only: tuple[str, ...] | None = None   # loader rows to run; None: all (the floor always runs)

    def __post_init__(self):
        for name in ("n", "batch_size", "batches", "repeats", "floor_images"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0 or self.epochs_rss < 0 or (self.drain is not None and self.drain < 0):
            raise ValueError("--warmup, --drain and --epochs-rss must be >= 0")


QUICK = {"n": 32, "batch_size": 8, "batches": 2, "repeats": 1, "warmup": 1, "drain": 1,
         "epochs_rss": 2, "floor_images": 8}


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

    streams, reasons, descriptions = _start_streams(options, data, threads, device)
    floor_images = read_encoded(data, options.floor_images)
    boxes = floor.crop_boxes(floor_images)
    region_decoders, floor_reasons = floor.open_region_decoders()
    measured: dict[str, list[dict]] = {name: [] for name in streams}
    passes: dict[str, list[floor.FloorMeasurement]] = {name: [] for name in region_decoders}
    for r in range(options.repeats):
        order = [*streams, *region_decoders]
        for name in order[r % len(order):] + order[:r % len(order)]:
            if name in streams:
                measured[name].append(_measure(streams[name].batches, batches, drain, device))
            else:
                passes[name].append(floor.time_region_decode(name, region_decoders[name], floor_images, boxes))
        say(f"  round {r + 1}/{options.repeats} done")
    stats = {name: stream.stats() for name, stream in streams.items()}
    for stream in streams.values():
        stream.close()

    rows = [_loader_row(name, descriptions[name], measured.get(name), reasons.get(name), threads, device,
                        options.batch_size, batches, stats.get(name)) for name in descriptions]
    rows.append(_floor_row(passes, floor_reasons, threads))
    _add_ratios(rows)
    rss = _rss(options, data, threads, device)
    targets = _targets(rows, rss)
    say("")
    say(format_table(rows, [("loader", "name"), ("img/s", "images_per_s"), ("min", "images_per_s_min"),
                            ("max", "images_per_s_max"), ("xDataLoader", "x_dataloader"),
                            ("xDALI-CPU", "x_dali_cpu"), ("xfloor", "x_floor"), ("note", "reason")]))
    say(f"img/s: median of {options.repeats} interleaved rounds; x columns: this row's img/s over that row's, "
        f"as printed. Floor: {rows[-1]['description']}.")
    say("")
    say(targets_table(targets))
    if threads != 2:
        say(f"(the targets are set for 2 cores; this run used {threads})")
    if rss.get("rss_mib"):
        say(f"FeedLoader RSS after each epoch (MiB): {', '.join(f'{v:.0f}' for v in rss['rss_mib'])}; "
            f"growth {rss['growth_pct']:+.2f}%")
    params = dataclasses.asdict(options) | {"threads": threads, "device": device, "drain": drain, "batches": batches,
                                            "images_per_measurement": batches * options.batch_size,
                                            "data": data.to_dict(), "work": WORK}
    path = write_results(NAME, rows, params, options.out, machine, targets=targets, rss=rss)
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
    makers = {
        DATALOADER: (f"torch DataLoader, {threads} workers: PIL decode, RandomResizedCrop + flip + normalize "
                     "written with PIL and torch", lambda: baselines.dataloader_stream(
                         str(data.folder), options.batch_size, threads, device)),
        DALI_CPU: ("DALI CPU pipeline: readers.file -> decoders.image_random_crop -> resize -> "
                   "crop_mirror_normalize", lambda: baselines.dali_cpu_stream(
                       str(data.folder), options.batch_size, threads, device)),
        FEEDLINE: (f"FeedLoader(decoder='auto', device={device!r}), {threads} threads",
                   lambda: baselines.feedloader_stream(str(data.packed), options.batch_size, threads, device)),
    }
    for decoder in options.decoders:
        makers[f"feedline-{decoder}"] = (
            f"FeedLoader(decoder={decoder!r}, device={device!r}), {threads} threads",
            lambda decoder=decoder: baselines.feedloader_stream(str(data.packed), options.batch_size, threads,
                                                                device, decoder))
    streams, reasons, descriptions = {}, {}, {}
    for name, (description, make) in makers.items():
        if options.only is not None and name not in options.only:
            continue
        descriptions[name] = description
        stream = None
        try:
            stream = make()
            _check_first(name, stream.batches, options.batch_size)
            for _ in range(max(options.warmup - 1, 0)):
                next(stream.batches)
        except Exception as exc:  # not installed, BackendUnavailable and the like: reported, not fatal
            log.debug("loader %s failed to start", name, exc_info=True)
            reasons[name] = (f"not installed: {exc}" if isinstance(exc, ImportError)
                             else f"{type(exc).__name__}: {exc}")
            if stream is not None:
                stream.close()
            continue
        streams[name] = stream
    return streams, reasons, descriptions


def _check_first(name: str, stream, batch_size: int) -> None:
    import torch
    images, labels = next(stream)
    if tuple(images.shape) != (batch_size, 3, 224, 224) or images.dtype != torch.float32 or len(labels) != batch_size:
        raise RuntimeError(f"{name} gave {tuple(images.shape)} {images.dtype}, expected "
                           f"({batch_size}, 3, 224, 224) float32: not the same work")


def _measure(stream, batches: int, drain: int, device: str) -> dict:
    """The images delivered in ``batches`` batches and the seconds they took, after
    ``drain`` untimed batches."""
    for _ in range(drain):
        next(stream)
    _sync(device)
    images = 0
    t0 = time.perf_counter()
    for _ in range(batches):
        batch, _labels = next(stream)
        images += len(batch)
    _sync(device)
    return {"images": images, "seconds": time.perf_counter() - t0}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch
        torch.cuda.synchronize()


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


def _floor_row(passes: dict[str, list], reasons: dict[str, str], threads: int) -> dict:
    """The best region decoder's median single-thread rate, times ``threads``."""
    single = {name: Spread.of([p.images_per_s for p in runs]).median for name, runs in passes.items() if runs}
    row = {"name": FLOOR, "threads": threads, "device": "cpu", "available": bool(single),
           "reason": None if single else "no region decoder: " + "; ".join(f"{k}: {v}" for k, v in reasons.items()),
           "images_per_s": None, "images_per_s_min": None, "images_per_s_max": None,
           "single_thread_images_per_s": single, "unavailable_decoders": reasons, "measurements": []}
    if not single:
        row["description"] = "best single-thread region decode x threads (none available)"
        return row
    best = max(single, key=single.get)
    row.update(decoder=best, measurements=[dataclasses.asdict(p) for p in passes[best]],
               description=f"{floor.REGION_DECODERS[best][0]}, 1 thread {single[best]:.0f} img/s x {threads}")
    _rates(row, [p.images_per_s * threads for p in passes[best]])
    return row


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


def _targets(rows: list[dict], rss: dict) -> list[dict]:
    """FeedLoader's default against each target ratio, and the memory check."""
    row = next((r for r in rows if r["name"] == FEEDLINE), None)
    out = [target(f"{FEEDLINE} / {other}", row[column] if row else None, needed) for other, column, needed in TARGETS]
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
                   help="also FeedLoader with each of these decoders (comma-separated), one row each")
    p.add_argument("--epochs-rss", type=int, metavar="E", help="FeedLoader epochs of the memory check "
                                                               "(default 5; 0 skips it)")
    p.add_argument("--floor-images", type=int, metavar="N", help="images of each decode-floor pass (default 200)")


def main(argv: list[str] | None = None) -> int:
    return run_main("bench/loaders.py", __doc__.split("\n\n")[0], LoaderBenchOptions, QUICK, add_arguments,
                    run_loader_bench, argv)


if __name__ == "__main__":
    sys.exit(main())
