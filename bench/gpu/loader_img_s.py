"""loader_img_s: FeedLoader on the GPU against torch's DataLoader + PIL + torchvision, side
by side in one run, on the same photos and the same work: RandomResizedCrop 224 (scale
0.08-1, ratio 3/4-4/3) + horizontal flip + ImageNet normalization, delivered on the GPU as
bf16 in channels_last, batch 256, 16 decode threads / 16 workers. Target >= 10,000 img/s.

    python bench/gpu/loader_img_s.py --data photos.lmdb --folder photos/ --out loader_img_s.json

Rows: ``feedline`` (FeedLoader's thread engine, default decoder, the CUDA Finisher),
``feedline-processes`` (its worker engine, ``--threads`` worker processes writing into
pinned shared memory), ``torchvision`` (the ImageNet example's recipe: transforms.v2 on PIL
images in the workers, float32 normalized there, then copied to the GPU) and
``torchvision-uint8`` (the same crops as uint8 in the workers, normalized on the GPU: a
quarter of the bytes to collate and copy).

With ``--gil-seconds S`` the worker engine then runs alone under py-spy (bench/scaling.py's
method, its mode ``cuda``): the GIL the consumer and each worker hold per image, ``gil`` in
the JSON. The JSON is written before that step too, and ``--timeout`` bounds the whole run:
the step is left out, with its reason, when too little time is left for it.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/gpu/loader_img_s.py`: the repository root on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.common import ROOT, format_table, say, target, write_results  # noqa: E402
from bench.gpu import common  # noqa: E402
from bench.streams import forever  # noqa: E402

log = logging.getLogger(__name__)
NAME = "loader_img_s"
TARGET_IMG_S = 10_000
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
GIL_START_S = 20   # the GIL step beyond its two sampling windows: a fresh loader's start, py-spy's, the end


def feedline_stream(packed: str, args, device: str, engine: str = "threads"):
    import torch
    from feedline import FeedLoader, OutputSpec
    loader = FeedLoader(packed, batch_size=args.batch_size, shuffle=True, train=True, size=224,
                        num_workers=args.threads, device=device,   # channels_last asked: the CPU's default is NCHW
                        output=OutputSpec(dtype=torch.bfloat16, channels_last=True),
                        drop_last=True, decoder=args.decoder, engine=engine)
    return loader, forever(lambda: loader)


def torchvision_stream(folder: str, args, device: str, uint8: bool):
    """DataLoader + ImageFolder (PIL) + transforms.v2, then on the device: bf16, channels_last."""
    import torch
    from torchvision import datasets
    from torchvision.transforms import v2
    steps = [v2.RandomResizedCrop(224, interpolation=v2.InterpolationMode.BILINEAR, antialias=True),
             v2.RandomHorizontalFlip(0.5), v2.PILToTensor()]
    if not uint8:
        steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]
    data = datasets.ImageFolder(folder, transform=v2.Compose(steps + [v2.ToPureTensor()]))
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True, num_workers=args.threads,
                                         pin_memory=device.startswith("cuda"), drop_last=True,
                                         persistent_workers=True, generator=torch.Generator().manual_seed(0))
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255

    def to_device(batches):
        for images, labels in batches:
            images = images.to(device, non_blocking=True)
            if uint8:
                images = (images.float() - mean) / std
            yield (images.to(torch.bfloat16).contiguous(memory_format=torch.channels_last),
                   labels.to(device, non_blocking=True))
    return loader, to_device(forever(lambda: loader))


def check_batch(name: str, batch, args, device: str) -> None:
    import torch
    images, labels = batch
    if (tuple(images.shape) != (args.batch_size, 3, 224, 224) or images.dtype != torch.bfloat16
            or images.device.type != device or not images.is_contiguous(memory_format=torch.channels_last)
            or len(labels) != args.batch_size):
        raise RuntimeError(f"{name} gave {tuple(images.shape)} {images.dtype} on {images.device}: not the same work")


def start(args, device: str) -> tuple[dict, dict, dict]:
    """name -> batch iterator, name -> loader (for stats and closing), name -> reason it did not start."""
    makers = {}
    if args.folder:  # first: their workers fork before FeedLoader's threads exist
        makers["torchvision"] = lambda: torchvision_stream(args.folder, args, device, uint8=False)
        makers["torchvision-uint8"] = lambda: torchvision_stream(args.folder, args, device, uint8=True)
    makers["feedline"] = lambda: feedline_stream(args.data, args, device)
    makers["feedline-processes"] = lambda: feedline_stream(args.data, args, device, engine="processes")
    streams, loaders, reasons = {}, {}, {}
    for name, make in makers.items():
        try:
            loader, stream = make()
            check_batch(name, next(stream), args, device)
            for _ in range(args.warmup - 1):
                next(stream)
        except Exception as exc:  # e.g. torchvision missing: reported in the JSON, the others still run
            log.debug("%s did not start", name, exc_info=True)
            reasons[name] = f"{type(exc).__name__}: {exc}"
            continue
        streams[name], loaders[name] = stream, loader
    return streams, loaders, reasons


def gil_figures(args, device: str, left_s: float) -> dict:
    """The worker engine alone under py-spy, as bench/scaling.py measures it (mode ``cuda``:
    this benchmark's work): the GIL its consumer and each worker hold per image, or why not."""
    need = 2 * args.gil_seconds + GIL_START_S
    if left_s < need:
        return {"reason": f"not run: {left_s:.0f} s left of --timeout, {need:.0f} s needed"}
    with tempfile.TemporaryDirectory(prefix="loader-gil-") as tmp:
        out = Path(tmp) / "gil.json"
        cmd = [sys.executable, str(ROOT / "bench" / "scaling.py"), "--store", args.data, "--engines", "processes",
               "--modes", "cuda" if device.startswith("cuda") else "float", "--workers", str(args.threads),
               "--seconds", str(args.gil_seconds), "--out", str(out)]
        done = common.run_for(cmd, left_s)
        rows = json.loads(out.read_text())["results"] if out.is_file() else []
    if not rows:
        return {"reason": f"bench/scaling.py exited {done.returncode}: {(done.stderr or done.stdout)[-600:]}"}
    row = rows[0]
    workers = [{k: r.get(k) for k in ("process", "gil_share", "gil_ms_per_image", "gil_ms_per_own_image",
                                      "pss_own_mib")} for r in row["processes"] if not r["consumer"]]
    return {"engine": row["engine"], "mode": row["mode"], "workers": row["workers"], "img_s": row["img_s"],
            "consumer_gil_ms_per_image": row["consumer_gil_ms_per_image"],
            "consumer_ceiling_img_s": row["consumer_ceiling_img_s"],
            "worker_gil_ms_per_own_image": row["worker_gil_ms_per_own_image"],
            "consumer_gil_where": row["consumer_gil_where"], "per_worker": workers, "reason": None}


def run(args) -> dict:
    started = time.monotonic()
    device = common.device_for(args)
    args.decoder = args.decoder or common.cpu_decoder()
    say(f"{NAME}: decoder {args.decoder!r}, batch {args.batch_size}, {args.threads} threads/workers, device {device}, "
        f"{args.batches} timed batches x {args.repeats} repeats")
    streams, loaders, reasons = start(args, device)
    drain = args.drain if args.drain is not None else 2 * args.threads + 2
    samples = common.interleaved(list(streams), args.repeats, lambda n: common.measure(
        streams[n], args.batches, drain, device, args.batch_size), reasons, say)
    for stream in streams.values():
        stream.close()
    if "feedline-processes" in loaders:   # its workers go before the profile and the GIL step
        loaders.pop("feedline-processes").close()
    profile, diagnosis = None, None
    if "feedline" in loaders and "feedline" not in reasons:  # alone, in an epoch of its own: where time goes
        per_epoch = len(loaders["feedline"])
        profile = common.profiled_run(loaders["feedline"], max(1, min(args.batches, per_epoch - 2)),
                                      min(2, per_epoch - 1), device, args.threads)
        diagnosis = common.diagnose(profile, args.threads)
    if "feedline" in loaders:
        loaders["feedline"].close()
    loaders.clear()   # the DataLoaders' persistent workers go with them: the cores are free for the GIL step
    rows = [{"name": n, "images_per_s": common.median(samples.get(n)), "samples": samples.get(n),
             "reason": reasons.get(n)} for n in ["feedline", "feedline-processes", "torchvision", "torchvision-uint8"]
            if n in samples or n in reasons]
    best = {r["name"]: r["images_per_s"] for r in rows}
    for row in rows:
        row["x_torchvision"] = (row["images_per_s"] / best["torchvision"]
                                if row["images_per_s"] and best.get("torchvision") else None)
    targets = [target("FeedLoader img/s, bf16 channels_last on the GPU", best.get("feedline"), TARGET_IMG_S,
                      unit=" img/s")]
    say(format_table(rows, [("loader", "name"), ("img/s", "images_per_s"), ("x torchvision", "x_torchvision"),
                            ("note", "reason")]))
    if profile:
        say(f"feedline profile: threads {profile['decode_threads_busy']:.0%} busy, consumer waited "
            f"{profile['consumer_wait_fraction']:.0%}; {diagnosis}")
    params = {k: v for k, v in vars(args).items() if k != "out"} | {"device": device, "drain": drain,
                                                                     "gpu": common.gpu_name()}
    figures = dict(targets=targets, profile=profile, diagnosis=diagnosis, loader_img_s=best.get("feedline"),
                   loader_processes_img_s=best.get("feedline-processes"), torchvision_img_s=best.get("torchvision"),
                   torchvision_uint8_img_s=best.get("torchvision-uint8"))
    gil = {"reason": "not asked (--gil-seconds 0)"}
    path = write_results(NAME, rows, params, args.out, gil=gil, **figures)   # kept if the GIL step is stopped
    if args.gil_seconds:
        left = (args.timeout - (time.monotonic() - started)) if args.timeout else float("inf")
        gil = gil_figures(args, device, left)
        if gil["reason"] is None:
            say(f"feedline-processes under py-spy: {gil['img_s']:.0f} img/s, consumer GIL "
                f"{gil['consumer_gil_ms_per_image']} ms/img, worker GIL {gil['worker_gil_ms_per_own_image']} "
                f"ms/own img ({gil['workers']} workers)")
        else:
            say(f"GIL step: {gil['reason']}")
        path = write_results(NAME, rows, params, args.out, gil=gil, **figures)
    say(f"wrote {path}")
    return {"path": str(path), "rows": rows, "gil": gil}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_common(p)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--batches", type=int, default=40, help="timed batches per measurement (default 40)")
    p.add_argument("--drain", type=int, help="untimed batches before each (default 2 x threads + 2)")
    p.add_argument("--warmup", type=int, default=4, help="batches consumed once after a loader starts")
    p.add_argument("--decoder", help="FeedLoader's decoder (default: the default CPU decoder, on the threads)")
    p.add_argument("--gil-seconds", type=float, default=0,
                   help="then the worker engine under py-spy for 2 x this many seconds (default 0: not run)")
    p.add_argument("--timeout", type=float, help="seconds for the whole run: the GIL step only if it fits")
    args = p.parse_args(argv)
    common.apply_smoke(args)
    common.positive(p, args, "batch_size", "batches", "threads", "repeats", "warmup")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
