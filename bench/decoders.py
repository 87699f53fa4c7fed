"""Decoder benchmark: images/s and megapixels/s of each JPEG decoder, on one thread and
on all cores, its ratio to PIL, and its mean absolute pixel difference to PIL's decode
(so a fast wrong decoder shows).

    python bench/decoders.py [DATA] [--quick] [--threads T] [--repeats R] [--n N] [--only NAMES]

Every backend decodes the same in-memory encoded images. Per-image backends map over
a thread pool; DALI decodes batches with ``num_threads`` threads; torchvision's nvJPEG
decodes batches (one measurement, no thread count). After a warm-up the repeats are
interleaved across backends, so noise on a shared machine hits all of them alike.
The ratio to PIL is the quotient of the two median rates printed. Megapixels count
source pixels, also for scaled and cropped decodes. Writes bench/results/local/decoders.json
and .png (the committed bench/results/decoders.json with --save).
"""
from __future__ import annotations

import dataclasses
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # `python bench/decoders.py`: the repository root, not bench/, on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import numpy as np  # noqa: E402

from bench.args import run_main  # noqa: E402
from bench.chart import save_bar_chart  # noqa: E402
from bench.common import format_table, rates, ratio, say, timed, write_results  # noqa: E402
from bench.data import prepare_data, read_encoded  # noqa: E402
from bench.decoder_backends import (Backend, Unavailable, backends, feedline_plan, image_size,  # noqa: E402
                                    pil_decode)
from bench.machine import machine_info, machine_line  # noqa: E402
from feedline.core.config import usable_cores  # noqa: E402

log = logging.getLogger(__name__)

NAME = "decoders"


@dataclass(frozen=True)
class DecoderBenchOptions:
    data: str | None = None        # packed file or image folder; None: generated photos
    n: int = 200                   # images decoded per pass (and generated without DATA)
    repeats: int = 5
    warmup: int = 1                # untimed passes over a slice of the images
    threads: int | None = None     # "all cores" thread count; None: the usable cores
    batch: int = 64                # batch size of DALI and the GPU decoders
    check: int = 16                # images compared with PIL for the correctness column
    out: str | None = None         # the JSON path; the PNG goes next to it
    quick: bool = False            # a tiny run: written under bench/results/quick/
    save: bool = False             # write bench/results/decoders.json, the committed results
    cache_dir: str | None = None
    chart: bool = True
    feedline: bool = True          # also feedline's own decoders (decode_into, crop 224)
    only: tuple[str, ...] | None = None   # backend names to run; None: all

    def __post_init__(self):
        for name in ("n", "repeats", "batch", "check"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0 or (self.threads is not None and self.threads < 1):
            raise ValueError("warmup must be >= 0 and threads >= 1")


QUICK = {"n": 16, "repeats": 1, "warmup": 1, "batch": 8, "check": 4}


def run_decoder_bench(options: DecoderBenchOptions) -> dict:
    """Run the benchmark, print the table, write the JSON (and PNG); returns the JSON object."""
    threads = options.threads or usable_cores()
    data = prepare_data(options.data, options.n, cache_dir=options.cache_dir, folder=options.data is None,
                        packed=False)
    images = read_encoded(data, options.n)
    sizes = [image_size(d) for d in images]
    megapixels = sum(h * w for h, w in sizes) / 1e6
    machine = machine_info()
    say(f"decoders: {len(images)} images ({megapixels / len(images):.2f} MP mean, "
        f"{sum(map(len, images)) / len(images) / 1024:.0f} KiB mean) from {data.source}")
    say(f"machine: {machine_line(machine)}")

    chosen = [b for b in backends(options.batch, options.feedline)
              if options.only is None or b.name in options.only]
    settings = [1, threads] if threads > 1 else [1]
    runners, reasons = _open_all(chosen, settings)
    check = images[:options.check]
    mads = _correctness(chosen, runners, reasons, check)
    seconds = _measure(runners, reasons, images, options)

    rows = []
    for backend in chosen:
        if backend.name in reasons:
            rows.append(_row(backend, None, None, None, len(images), megapixels, reason=reasons[backend.name]))
            continue
        for t in (settings if backend.threaded else [None]):
            rows.append(_row(backend, t, seconds[(backend.name, t)], mads.get(backend.name), len(images),
                             megapixels))
    _add_ratios(rows, settings[-1])
    for runner in runners.values():
        runner.close()

    say(format_table(_display_rows(rows, settings), _display_columns(settings)))
    params = dataclasses.asdict(options) | {"threads": threads, "images": len(images),
                                            "megapixels": megapixels, "data": data.to_dict()}
    path = write_results(NAME, rows, params, options.out, machine, quick=options.quick, save=options.save)
    say(f"wrote {path}")
    if options.chart:
        chart = _chart(rows, settings, path.with_suffix(".png"), machine)
        if chart:
            say(f"wrote {chart}")
    return {"path": str(path), "params": params, "results": rows, "machine": machine}


def _open_all(chosen: list[Backend], settings: list[int]):
    runners, reasons = {}, {}
    for backend in chosen:
        for t in (settings if backend.threaded else [None]):
            try:
                runners[(backend.name, t)] = backend.open(t or settings[-1])
            except Unavailable as exc:
                reasons[backend.name] = str(exc)
                break
            except Exception as exc:  # a backend that breaks is reported, not fatal
                log.debug("backend %s failed to open", backend.name, exc_info=True)
                reasons[backend.name] = f"failed to start: {type(exc).__name__}: {exc}"
                break
        if backend.name in reasons:
            for key in [k for k in runners if k[0] == backend.name]:
                runners.pop(key).close()
    return runners, reasons


def _correctness(chosen, runners, reasons, check: list[bytes]) -> dict[str, tuple[float | None, str]]:
    """backend name -> (mean absolute difference to PIL over ``check``, what it was compared with)."""
    reference = [pil_decode(d) for d in check]
    plan = None
    result = {}
    for backend in chosen:
        key = next((k for k in runners if k[0] == backend.name), None)
        if key is None:
            continue
        try:
            decoded = runners[key].run(check, True)
        except Exception as exc:
            reasons[backend.name] = f"failed: {type(exc).__name__}: {exc}"
            continue
        if backend.region_of:
            boxes = feedline_plan(check, backend.region_of)[0]
            refs = [r[t:t + h, l:l + w] for r, (t, l, h, w) in zip(reference, boxes)]
            note = "vs PIL decode, cropped to the box"
        elif backend.crop_size:
            plan = plan or feedline_plan(check, backend.crop_size)
            refs = [_pil_crop(r, box, flip, backend.crop_size) for r, box, flip in zip(reference, *plan)]
            note = f"vs PIL crop + bilinear resize to {backend.crop_size}"
        elif backend.scale != (1, 1):
            refs = [_pil_resized(r, d.shape[:2]) for r, d in zip(reference, decoded)]
            note = f"vs PIL decode box-resized to {backend.output}"
        else:
            refs, note = reference, "vs PIL decode"
        diffs = [_mad(a, b) for a, b in zip(decoded, refs)]
        if any(d is None for d in diffs):
            result[backend.name] = (None, "n/a: output shape differs from PIL's")
        else:
            result[backend.name] = (float(np.mean(diffs)), note)
    return result


def _measure(runners, reasons, images, options) -> dict:
    """(backend name, threads) -> seconds per pass over ``images``, repeats interleaved.
    A backend that fails is closed and gets its reason."""
    def drop(key, exc):
        reasons[key[0]] = f"failed: {type(exc).__name__}: {exc}"
        for other in [k for k in runners if k[0] == key[0]]:
            runners.pop(other).close()

    for key in [k for k in runners if k[0] in reasons]:   # failed the correctness pass
        runners.pop(key).close()
    for key in list(runners):   # warm-up: first-call allocations, thread start, GPU context
        warm = images[:max(min(len(images), options.batch), 4 * (key[1] or 1))]
        try:
            for _ in range(options.warmup):
                runners[key].run(warm, False)
        except Exception as exc:
            drop(key, exc)
    seconds = {key: [] for key in runners}
    for r in range(options.repeats):
        keys = list(runners)
        for key in keys[r % max(len(keys), 1):] + keys[:r % max(len(keys), 1)]:
            if key not in runners:
                continue
            try:
                seconds[key].append(timed(lambda: runners[key].run(images, False)))
            except Exception as exc:
                drop(key, exc)
        log.debug("repeat %d/%d done", r + 1, options.repeats)
    return seconds


def _row(backend: Backend, threads, seconds, mad, count, megapixels, reason=None) -> dict:
    row = {"name": backend.name, "library": backend.library, "description": backend.description,
           "output": backend.output, "threads": threads, "available": reason is None, "reason": reason,
           "images_per_s": None, "images_per_s_min": None, "images_per_s_max": None,
           "mp_per_s": None, "mp_per_s_min": None, "mp_per_s_max": None, "ratio": None,
           "mad_vs_pil": None, "mad_note": None, "seconds": seconds}
    if seconds:
        ips, mps = rates(count, seconds), rates(megapixels, seconds)
        row.update(images_per_s=ips.median, images_per_s_min=ips.min, images_per_s_max=ips.max,
                   mp_per_s=mps.median, mp_per_s_min=mps.min, mp_per_s_max=mps.max)
    if mad is not None:
        row["mad_vs_pil"], row["mad_note"] = mad
    return row


def _add_ratios(rows: list[dict], all_threads: int) -> None:
    """ratio: the median rate over PIL's median rate at the same thread count (all cores
    for unthreaded ones): the quotient of the two numbers the table prints."""
    pil = {r["threads"]: r["images_per_s"] for r in rows if r["name"] == "pil" and r["images_per_s"]}
    for row in rows:
        row["ratio"] = ratio(row["images_per_s"], pil.get(row["threads"] if row["threads"] is not None
                                                          else all_threads))


def _display_rows(rows: list[dict], settings: list[int]) -> list[dict]:
    shown: dict[str, dict] = {}
    for row in rows:
        d = shown.setdefault(row["name"], {"name": row["name"], "output": row["output"],
                                           "mad": row["mad_vs_pil"], "note": row["reason"] or ""})
        t = row["threads"] if row["threads"] is not None else settings[-1]
        if row["available"]:
            d[f"ips{t}"], d[f"mps{t}"], d[f"x{t}"] = row["images_per_s"], row["mp_per_s"], row["ratio"]
            spread = (row["images_per_s_max"] - row["images_per_s_min"]) / row["images_per_s"]
            d[f"spread{t}"] = f"±{50 * spread:.0f}%"
            if row["threads"] is None:
                d["note"] = "batched on the GPU"
    return list(shown.values())


def _display_columns(settings: list[int]) -> list[tuple[str, str]]:
    columns = [("decoder", "name"), ("output", "output")]
    for t in settings:
        label = "1 thread" if t == 1 else f"{t} thr"
        columns += [(f"{label} img/s", f"ips{t}"), ("spread", f"spread{t}"), ("MP/s", f"mps{t}"),
                    ("xPIL", f"x{t}")]
    return columns + [("MAD vs PIL", "mad"), ("note", "note")]


def _chart(rows, settings, path: Path, machine: dict):
    names = list(dict.fromkeys(r["name"] for r in rows))   # unavailable ones show as n/a
    series = {}
    for t in settings:
        label = "1 thread" if t == 1 else f"{t} threads"
        by_name = {r["name"]: r["images_per_s"] for r in rows
                   if (r["threads"] if r["threads"] is not None else settings[-1]) == t}
        series[label] = [by_name.get(n) for n in names]
    gpu = machine["gpu"]["name"] if machine["gpu"] else "no GPU"
    return save_bar_chart(path, names, series, f"JPEG decode: {machine['cpu']}, {machine['usable_cores']} cores, "
                                               f"{gpu}", "images/s (higher is better)")


def _mad(a: np.ndarray, b: np.ndarray) -> float | None:
    if a.shape != b.shape:
        return None
    return float(np.mean(np.abs(a.astype(np.int16) - b.astype(np.int16))))


def _pil_resized(image: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
    from PIL import Image
    return np.asarray(Image.fromarray(image).resize((hw[1], hw[0]), Image.Resampling.BOX))


def _pil_crop(image: np.ndarray, box, flip: bool, size: int) -> np.ndarray:
    from PIL import Image
    top, left, h, w = (int(v) for v in box)
    out = Image.fromarray(image).resize((size, size), Image.Resampling.BILINEAR,
                                        box=(left, top, left + w, top + h))
    if flip:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(out)


def add_arguments(p) -> None:
    p.add_argument("--n", type=int, metavar="N", help="images decoded per pass, and generated without DATA "
                                                      "(default 200)")
    p.add_argument("--batch", type=int, metavar="B", help="batch size of DALI and the GPU decoders (default 64)")
    p.add_argument("--check", type=int, metavar="K", help="images compared with PIL (default 16)")
    p.add_argument("--warmup", type=int, metavar="W", help="untimed warm-up passes (default 1)")
    p.add_argument("--no-feedline", dest="feedline", action="store_false", default=None,
                   help="skip feedline's own decoders (decode_into a 224 crop)")


def main(argv: list[str] | None = None) -> int:
    return run_main("bench/decoders.py", __doc__.split("\n\n")[0], DecoderBenchOptions, QUICK, add_arguments,
                    run_decoder_bench, argv)


if __name__ == "__main__":
    sys.exit(main())
