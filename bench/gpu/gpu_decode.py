"""gpu_decode_img_s and dali_mixed_img_s: the loader's work (RandomResizedCrop 224 + flip +
normalize, bf16 channels_last on the GPU, batch 256) with the decoding on the GPU, against
the same FeedLoader decoding on 16 CPU threads, in one run. Target: GPU decode >= 1.5x the
CPU-thread rate. Then which decoder does the work: whole-image decode rates of one batch
through nvImageCodec restricted to one backend at a time (the hardware JPEG decoder,
nvJPEG on CUDA, the hybrid CPU+GPU path, the CPU).

    python bench/gpu/gpu_decode.py --data photos.lmdb --out gpu_decode.json

Loader rows: ``cpu-threads`` (engine="threads", decoder="auto" + the CUDA Finisher), ``gpu``
(engine="gpu": nvImageCodec on the GPU), ``dali`` (engine="dali": DALI's mixed decoder).
A row that cannot start (DALI not installed, no GPU source yet) says why in the JSON.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/gpu/gpu_decode.py`: the repository root on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.common import format_table, ratio, say, target, write_results  # noqa: E402
from bench.gpu import common  # noqa: E402
from bench.streams import forever  # noqa: E402

log = logging.getLogger(__name__)
NAME = "gpu_decode"
TARGET_X_CPU = 1.5
LOADERS = {"cpu-threads": "threads", "gpu": "gpu", "dali": "dali"}   # each row's engine= (threads: decoder "auto")
BACKENDS = ("HW_GPU_ONLY", "GPU_ONLY", "HYBRID_CPU_GPU", "CPU_ONLY")


def loader_rows(args, device: str) -> tuple[dict, dict, dict]:
    import torch
    from feedline import FeedLoader
    streams, loaders, reasons = {}, {}, {}
    for name, engine in LOADERS.items():
        if device == "cpu" and name != "cpu-threads":
            reasons[name] = "needs CUDA"
            continue
        try:
            loader = FeedLoader(args.data, batch_size=args.batch_size, shuffle=True, train=True, size=224,
                                num_workers=args.threads, device=device, dtype=torch.bfloat16,
                                drop_last=True, engine=engine)
            stream = forever(lambda loader=loader: loader)
            for _ in range(args.warmup):
                next(stream)
        except Exception as exc:  # not installed, not built yet: said in the JSON, the rest still runs
            log.debug("%s did not start", name, exc_info=True)
            reasons[name] = f"{type(exc).__name__}: {exc}"
            continue
        streams[name], loaders[name] = stream, loader
    return streams, loaders, reasons


def backend_rates(args, device: str) -> list[dict]:
    """Whole-image decode of one batch of records, nvImageCodec limited to one backend."""
    import torch
    from feedline.decoders.nvimgcodec_library import load_nvimgcodec
    from feedline.stores import open_dataset
    nv = load_nvimgcodec()
    with open_dataset(args.data) as store:
        count = min(args.batch_size, len(store))
        encoded = [bytes(memoryview(store.read(i))) for i in range(count)]
    streams = [nv.CodeStream(data) for data in encoded]
    rows = []
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
    return rows


def run(args) -> dict:
    device = common.device_for(args)
    say(f"{NAME}: batch {args.batch_size}, {args.threads} threads, device {device}")
    streams, loaders, reasons = loader_rows(args, device)
    drain = args.drain if args.drain is not None else args.threads + 2
    samples = common.interleaved(list(streams), args.repeats, lambda n: common.measure(
        streams[n], args.batches, drain, device, args.batch_size), reasons, say)
    described = {name: repr(loader.source) for name, loader in loaders.items()}
    for name, stream in streams.items():
        stream.close()
        loaders[name].close()
    rates = {n: common.median(samples.get(n)) for n in LOADERS}
    rows = [{"name": n, "decoder": common.cpu_decoder() if LOADERS[n] == "threads" else LOADERS[n],
             "images_per_s": rates[n], "samples": samples.get(n),
             "x_cpu_threads": ratio(rates[n], rates["cpu-threads"]), "source": described.get(n),
             "reason": reasons.get(n)} for n in LOADERS]
    backends = backend_rates(args, device)
    targets = [target("engine='gpu' img/s over the CPU threads' (same run)", rows[1]["x_cpu_threads"], TARGET_X_CPU),
               target("engine='dali' img/s over the CPU threads' (same run)", rows[2]["x_cpu_threads"], TARGET_X_CPU)]
    say(format_table(rows, [("loader", "name"), ("img/s", "images_per_s"), ("x CPU threads", "x_cpu_threads"),
                            ("note", "reason")]))
    say(format_table(backends, [("nvImageCodec backend", "backend"), ("whole-image img/s", "images_per_s"),
                                ("note", "reason")]))
    fastest = max((b for b in backends if b.get("images_per_s")), key=lambda b: b["images_per_s"], default=None)
    params = {k: v for k, v in vars(args).items() if k != "out"} | {"device": device, "drain": drain,
                                                                     "gpu": common.gpu_name()}
    path = write_results(NAME, rows, params, args.out, targets=targets, backends=backends,
                         gpu_decode_img_s=rates["gpu"], dali_mixed_img_s=rates["dali"],
                         cpu_threads_img_s=rates["cpu-threads"],
                         fastest_backend=fastest["backend"] if fastest else None)
    say(f"wrote {path}")
    return {"path": str(path), "rows": rows, "backends": backends}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_common(p)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--batches", type=int, default=30, help="timed batches per measurement (default 30)")
    p.add_argument("--drain", type=int, help="untimed batches before each (default threads + 2)")
    p.add_argument("--warmup", type=int, default=4, help="batches consumed once after a loader starts")
    args = p.parse_args(argv)
    common.apply_smoke(args)
    common.positive(p, args, "batch_size", "batches", "threads", "repeats", "warmup")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
