"""Loader benchmark: FeedLoader against a torch DataLoader decoding with PIL, a DALI CPU
pipeline and the libjpeg-turbo decode floor, side by side in one run, on the same
images, with the same work (random-resized crop 224 + flip + normalize to float32,
``drop_last``) and the same number of cores.

Each loader is an endless stream of batches, created and warmed up once. A
measurement first drains a few batches untimed (whatever the loader buffered while
idle), then times ``batches`` batches; the repeats are interleaved across loaders, in
a rotating order, so noise on a shared machine hits all alike. The decode floor is
the single-thread full-decode rate of libjpeg-turbo times the thread count, measured
in the same rounds (with, for reference, the same decode over a pool of all threads,
which shows how far one core's rate scales on this machine). FeedLoader's resident memory over epochs is measured in a
process of its own.
"""
from __future__ import annotations

import dataclasses
import logging
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # `python bench/loaders.py`: the repository root, not bench/, on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench.args import run_main  # noqa: E402
from bench.chart import save_bar_chart  # noqa: E402
from bench.common import Spread, format_table, say, write_results  # noqa: E402
from bench.data import prepare_data, read_encoded  # noqa: E402
from bench.machine import machine_info, machine_line  # noqa: E402
from feedline.config import usable_cores  # noqa: E402

log = logging.getLogger(__name__)

NAME = "loaders"
DATALOADER, DALI_CPU, FLOOR = "torch-dataloader-pil", "dali-cpu", "decode-floor"
POOL = "decode-pool"   # the same decode over a pool of all threads: how far 1 thread x cores scales
FEEDLINE_DECODERS = ("turbojpeg", "opencv", "turbojpeg-fast")
# (what, denominator row, minimum ratio): the targets on a 2-core CPU machine
TARGETS = ((DATALOADER, 2.5), (DALI_CPU, 1.8), (FLOOR, 0.9))
RSS_GROWTH_LIMIT_PCT = 2.0


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
    epochs_rss: int = 5         # FeedLoader epochs for the memory check; 0 skips it
    floor_images: int = 200     # images of the decode-floor measurement
    out: str | None = None
    cache_dir: str | None = None
    chart: bool = True
    only: tuple[str, ...] | None = None   # row names to run; None: all

    def __post_init__(self):
        for name in ("n", "batch_size", "batches", "repeats", "floor_images"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0 or self.epochs_rss < 0 or (self.drain is not None and self.drain < 0):
            raise ValueError("warmup, drain and epochs_rss must be >= 0")


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
    samples: dict[str, list[float]] = {name: [] for name in [*streams, FLOOR, POOL]}
    images_per_measure = batches * options.batch_size
    pool = ThreadPoolExecutor(threads, thread_name_prefix="bench-floor")
    for r in range(options.repeats):
        names = [*streams, FLOOR, POOL]
        for name in names[r % len(names):] + names[:r % len(names)]:
            if name == FLOOR:
                samples[name].append(_floor_rate(floor_images) * threads)
            elif name == POOL:
                samples[name].append(_floor_rate(floor_images, pool))
            else:
                seconds = _measure(streams[name].batches, batches, drain, device)
                samples[name].append(images_per_measure / seconds)
        say(f"  repeat {r + 1}/{options.repeats}: " + ", ".join(f"{n} {samples[n][-1]:.0f}/s" for n in names))
    pool.shutdown()
    stats = {name: stream.stats() for name, stream in streams.items()}
    for stream in streams.values():
        stream.close()

    rows = _rows(options, samples, reasons, descriptions, threads, device, stats)
    rss = _rss(options, data, threads, device)
    targets = _targets(rows, rss)
    say(format_table(rows, [("loader", "name"), ("img/s", "images_per_s"), ("min", "images_per_s_min"),
                            ("max", "images_per_s_max"), ("xDataLoader", "ratio"),
                            ("xDALI-CPU", "ratio_vs_dali_cpu"), ("xfloor", "ratio_vs_floor"), ("note", "reason")]))
    say("")
    say(format_table(targets, [("target", "check"), ("measured", "measured"), ("needed", "target"),
                               ("pass", "passed")]))
    if rss.get("rss_mib"):
        say(f"FeedLoader RSS after each epoch (MiB): {', '.join(f'{v:.0f}' for v in rss['rss_mib'])}; "
            f"growth {rss['growth_pct']:+.2f}%")
    params = dataclasses.asdict(options) | {"threads": threads, "device": device, "drain": drain, "batches": batches,
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


WORK = "random-resized crop 224 (scale 0.08-1, ratio 3/4-4/3) + flip p=0.5 + normalize to float32, drop_last"


def _start_streams(options, data, threads: int, device: str):
    """Name -> LoaderStream for each loader that starts; name -> reason for the others.
    The DataLoader goes first: its workers fork before any other loader starts threads."""
    from bench import baselines
    makers = {
        DATALOADER: ("torch DataLoader, PIL decode + the same augmentation in numpy/torch, "
                     f"{threads} workers", lambda: baselines.dataloader_stream(
                         str(data.folder), options.batch_size, threads, device)),
        DALI_CPU: ("DALI pipeline on the CPU: readers.file -> image_random_crop -> resize -> "
                   "crop_mirror_normalize", lambda: baselines.dali_cpu_stream(
                       str(data.folder), options.batch_size, threads, device)),
    }
    for decoder in FEEDLINE_DECODERS:
        makers[f"feedline-{decoder}"] = (
            f"FeedLoader(decoder={decoder!r}, device={device!r})",
            lambda decoder=decoder: baselines.feedloader_stream(str(data.packed), options.batch_size, threads,
                                                                device, decoder))
    streams, reasons = {}, {}
    descriptions = {FLOOR: f"libjpeg-turbo full decode (default flags): 1-thread rate x {threads}",
                    POOL: f"libjpeg-turbo full decode over a pool of {threads} threads (for reference)"}
    for name, (description, make) in makers.items():
        descriptions[name] = description
        if options.only is not None and name not in options.only:
            continue
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


def _measure(stream, batches: int, drain: int, device: str) -> float:
    """Seconds for ``batches`` batches, after ``drain`` untimed ones."""
    for _ in range(drain):
        next(stream)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(batches):
        next(stream)
    _sync(device)
    return time.perf_counter() - t0


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch
        torch.cuda.synchronize()


def _floor_rate(images: list[bytes], pool: ThreadPoolExecutor | None = None) -> float:
    """Images/s of fully decoding ``images`` with libjpeg-turbo (default flags), in this
    thread or over ``pool``."""
    from turbojpeg import TJPF_RGB, TurboJPEG
    tj = TurboJPEG()

    def decode(data):
        return tj.decode(data, TJPF_RGB)
    t0 = time.perf_counter()
    if pool is None:
        for data in images:
            decode(data)
    else:
        for _ in pool.map(decode, images):
            pass
    return len(images) / (time.perf_counter() - t0)


def _rows(options, samples, reasons, descriptions, threads: int, device: str, stats: dict) -> list[dict]:
    order = [DATALOADER, DALI_CPU, *(f"feedline-{d}" for d in FEEDLINE_DECODERS), FLOOR, POOL]
    rows = []
    for name in order:
        if options.only is not None and name not in options.only and name not in (FLOOR, POOL):
            continue
        row = {"name": name, "description": descriptions.get(name), "threads": threads,
               "device": "cpu" if name in (FLOOR, POOL, DALI_CPU) else device, "batch_size": options.batch_size,
               "available": name not in reasons, "reason": reasons.get(name),
               "images_per_s": None, "images_per_s_min": None, "images_per_s_max": None, "samples": None,
               "loader_stats": stats.get(name)}
        if samples.get(name):
            spread = Spread.of(samples[name])
            row.update(images_per_s=spread.median, images_per_s_min=spread.min, images_per_s_max=spread.max,
                       samples=samples[name])
        rows.append(row)
    for row in rows:
        mine = samples.get(row["name"])
        row["ratio"] = paired_ratio(mine, samples.get(DATALOADER))
        row["ratio_vs_dali_cpu"] = paired_ratio(mine, samples.get(DALI_CPU))
        row["ratio_vs_floor"] = paired_ratio(mine, samples.get(FLOOR))
    return rows


def paired_ratio(a: list[float] | None, b: list[float] | None) -> float | None:
    """The median over rounds of a[r] / b[r]: both measured in the same round, so load
    that hits one round hits both sides of its ratio."""
    if not a or not b or len(a) != len(b):
        return None
    return statistics.median(x / y for x, y in zip(a, b))


def _rss(options, data, threads: int, device: str) -> dict:
    if options.epochs_rss == 0 or (options.only is not None and "feedline-turbojpeg" not in options.only):
        return {"skipped": True}
    from bench.rss import measure_rss_in_subprocess
    say(f"measuring FeedLoader's resident memory over {options.epochs_rss} epochs ...")
    try:
        return measure_rss_in_subprocess(str(data.packed), options.epochs_rss, options.batch_size, threads,
                                         "turbojpeg", device)
    except Exception as exc:
        log.warning("RSS measurement failed: %s", exc)
        return {"error": str(exc)}


def _targets(rows: list[dict], rss: dict) -> list[dict]:
    """Each FeedLoader row against each target ratio, and the memory check."""
    speed = {r["name"]: r["images_per_s"] for r in rows}
    key = {DATALOADER: "ratio", DALI_CPU: "ratio_vs_dali_cpu", FLOOR: "ratio_vs_floor"}
    out = []
    for row in rows:
        if not row["name"].startswith("feedline-"):
            continue
        for other, needed in TARGETS:
            measured = row[key[other]]
            out.append({"check": f"{row['name']} / {other}", "measured": measured, "target": f">= {needed}",
                        "passed": None if measured is None or speed.get(other) is None else measured >= needed})
    growth = rss.get("growth_pct")
    out.append({"check": f"feedline-turbojpeg RSS growth over {rss.get('epochs', '?')} epochs (%)",
                "measured": growth, "target": f"< {RSS_GROWTH_LIMIT_PCT}",
                "passed": None if growth is None else growth < RSS_GROWTH_LIMIT_PCT})
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
    p.add_argument("--epochs-rss", type=int, metavar="E", help="FeedLoader epochs of the memory check "
                                                               "(default 5; 0 skips it)")
    p.add_argument("--floor-images", type=int, metavar="N", help="images of the decode-floor measurement "
                                                                 "(default 200)")


def main(argv: list[str] | None = None) -> int:
    return run_main("bench/loaders.py", __doc__.split("\n\n")[0], LoaderBenchOptions, QUICK, add_arguments,
                    run_loader_bench, argv)


if __name__ == "__main__":
    sys.exit(main())
