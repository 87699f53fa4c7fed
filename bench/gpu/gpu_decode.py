"""gpu_decode: the loader's work (RandomResizedCrop 224 + flip + normalize, bf16
channels_last on the GPU, batch 256) with the decoding on the GPU, against FeedLoader's
default engine (16 worker processes decoding on the CPU) in the same run.

    python bench/gpu/gpu_decode.py --data photos.lmdb --out gpu_decode.json [--no-dali]

What engine="gpu" does depends on nvImageCodec: on 0.9.x, whose GPU region decode crashes
on the H100 (NVIDIA/nvImageCodec#55), it decodes each whole image on the GPU (nvJPEG: the
hardware decoder, else CUDA) and crops the box there; where region decode is safe it
decodes the box alone. The JSON says which (``gpu_mode``). Target: engine="gpu" at least as
fast as the default engine (``x_default`` >= 1): whole-image decoding does more work than
the CPU's region decode, and engine="gpu" is worth choosing only where it still wins.

Rows, one after the other (each loader closed before the next starts), each written to
the JSON after every repeat: ``default`` (engine="processes", what engine="auto" picks
without DALI), ``gpu`` (engine="gpu"), ``dali`` (engine="dali", unless --no-dali). Then which
nvImageCodec backend decodes whole images fastest: one batch through each of the hardware
decoder, nvJPEG on CUDA, the hybrid CPU+GPU path and the CPU, one at a time. A row that
cannot start (DALI not installed) says why in the JSON.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/gpu/gpu_decode.py`: the repository root on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.common import format_table, ratio, say, target  # noqa: E402
from bench.gpu import common  # noqa: E402
from bench.streams import forever  # noqa: E402

log = logging.getLogger(__name__)
NAME = "gpu_decode"
TARGET_X_DEFAULT = 1.0
LOADERS = {"default": "processes", "gpu": "gpu", "dali": "dali"}   # each row's engine=
BACKENDS = ("HW_GPU_ONLY", "GPU_ONLY", "HYBRID_CPU_GPU", "CPU_ONLY")


def gpu_mode(device: str) -> str:
    """What engine="gpu" does here: region decode, or whole images cropped on the GPU."""
    if device != "cuda":
        return "needs CUDA"
    try:
        from feedline.sources.gpu_region import gpu_region_decode
    except ImportError as exc:   # the engines moved: the figure stands, its label is unknown
        return f"unknown ({exc})"
    return "region decode" if gpu_region_decode(0, common.region_decode()) else "whole image + GPU crop"


def measure_row(name: str, args, device: str, report) -> tuple[list[float], str | None, str | None]:
    """One FeedLoader with engine=LOADERS[name], warmed up, then --repeats timed runs;
    ``report(samples)`` after each. (samples, why it failed, its source's description)."""
    import torch
    from feedline import FeedLoader
    samples, loader = [], None
    try:
        loader = FeedLoader(args.data, batch_size=args.batch_size, shuffle=True, train=True, size=224,
                            num_workers=args.threads, device=device, dtype=torch.bfloat16, drop_last=True,
                            engine=LOADERS[name], region_decode=common.region_decode() if name != "default" else None)
        stream = forever(lambda: loader)
        for _ in range(args.warmup):
            next(stream)
        common.timed_repeats(samples, name, stream, args, device, report, say)
        stream.close()
        return samples, None, repr(getattr(loader, "source", None))
    except Exception as exc:  # not installed, not built: said in the JSON, the rest still runs
        log.debug("%s failed", name, exc_info=True)
        return samples, f"{type(exc).__name__}: {exc}", None
    finally:
        if loader is not None:
            loader.close()


def backend_rates(args, device: str, rows: list[dict], report) -> None:
    """Whole-image decode of one batch of records, nvImageCodec limited to one backend at a
    time; each appended to ``rows``, then ``report()``."""
    import torch
    from feedline.decoders.nvimgcodec_library import load_nvimgcodec
    from feedline.stores import open_dataset
    nv = load_nvimgcodec()
    with open_dataset(args.data) as store:
        count = min(args.batch_size, len(store))
        encoded = [bytes(memoryview(store.read(i))) for i in range(count)]
    streams = [nv.CodeStream(data) for data in encoded]
    for kind in BACKENDS:
        if device == "cpu" and kind != "CPU_ONLY":
            rows.append({"backend": kind, "reason": "needs CUDA"})
            continue
        try:
            if kind == "CPU_ONLY":
                decoder = nv.Decoder(device_id=nv.NVIMGCODEC_DEVICE_CPU_ONLY, max_num_cpu_threads=args.threads,
                                     backends=[nv.Backend(nv.CPU_ONLY)])
            else:
                decoder = nv.Decoder(max_num_cpu_threads=args.threads, backends=[nv.Backend(getattr(nv, kind))])
            stream = torch.cuda.current_stream().cuda_stream if device == "cuda" else 0
            seconds = []
            for r in range(1 + args.repeats):  # the first is a warm-up
                common.sync(device)
                t0 = time.perf_counter()
                images = decoder.decode(streams, cuda_stream=stream)
                common.sync(device)
                if r:
                    seconds.append(time.perf_counter() - t0)
            failed = sum(image is None for image in images)
            rows.append({"backend": kind, "images": count, "failed": failed,   # rate of the decoded ones
                         "images_per_s": (count - failed) / common.median(seconds) if failed < count else None,
                         "reason": f"{failed} of {count} images not decoded by this backend" if failed else None})
        except Exception as exc:
            rows.append({"backend": kind, "reason": f"{type(exc).__name__}: {exc}"})
        report()


def run(args) -> dict:
    device = common.device_for(args, data=args.data, imports=("nvidia.nvimgcodec",))
    mode = gpu_mode(device)
    names = [n for n in LOADERS if not (args.no_dali and n == "dali")]
    say(f"{NAME}: batch {args.batch_size}, {args.threads} workers, device {device}; engine='gpu' here: {mode}")
    params = {k: v for k, v in vars(args).items() if k != "out"} | {"device": device, "gpu": common.gpu_name()}
    rows = {n: {"name": n, "engine": LOADERS[n], "images_per_s": None, "samples": [], "reason": None} for n in names}
    backends: list[dict] = []

    def write() -> Path:
        rate = {n: r["images_per_s"] for n, r in rows.items()}
        for row in rows.values():
            row["x_default"] = ratio(row["images_per_s"], rate["default"])
        return common.write(NAME, list(rows.values()), params, args.out, gpu_mode=mode, backends=backends,
                            targets=[target(f"engine='gpu' ({mode}) img/s over the default engine's (same run)",
                                            rows["gpu"]["x_default"], TARGET_X_DEFAULT)],
                            default_engine_img_s=rate["default"], gpu_img_s=rate["gpu"],
                            dali_mixed_img_s=rate.get("dali"), fastest_backend=fastest(backends))

    for name in names:
        if device == "cpu" and name != "default":
            rows[name]["reason"] = "needs CUDA"
            continue

        def report(samples, row=rows[name]):
            row.update(images_per_s=common.median(samples), samples=list(samples))
            write()
        samples, reason, source = measure_row(name, args, device, report)
        rows[name].update(reason=reason, source=source)
        report(samples)
    backend_rates(args, device, backends, write)
    path = write()
    say(format_table(list(rows.values()), [("loader", "name"), ("img/s", "images_per_s"),
                                           ("x default", "x_default"), ("note", "reason")]))
    say(format_table(backends, [("nvImageCodec backend", "backend"), ("whole-image img/s", "images_per_s"),
                                ("note", "reason")]))
    say(f"wrote {path}")
    return {"path": str(path), "rows": list(rows.values()), "backends": backends}


def fastest(backends: list[dict]) -> str | None:
    best = max((b for b in backends if b.get("images_per_s")), key=lambda b: b["images_per_s"], default=None)
    return best["backend"] if best else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_common(p)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--batches", type=int, default=30, help="timed batches per repeat (default 30)")
    p.add_argument("--drain", type=int, default=4, help="untimed batches before the first repeat (default 4)")
    p.add_argument("--warmup", type=int, default=4, help="batches consumed once after a loader starts")
    p.add_argument("--no-dali", action="store_true", help="leave the DALI row out (not installed: the core call)")
    args = p.parse_args(argv)
    common.apply_smoke(args)
    common.positive(p, args, "batch_size", "batches", "threads", "repeats", "warmup")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
