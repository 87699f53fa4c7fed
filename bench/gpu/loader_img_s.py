"""loader_img_s: FeedLoader's default engine on the GPU against torch's DataLoader + PIL +
torchvision, in one run, on the same photos and the same work: RandomResizedCrop 224 (scale
0.08-1, ratio 3/4-4/3) + horizontal flip + ImageNet normalization, delivered on the GPU as
bf16 in channels_last, batch 256, 16 worker processes each. Target >= 10,000 img/s.

    python bench/gpu/loader_img_s.py --data photos.lmdb --folder photos/ --out loader_img_s.json

In order of value, each written to the JSON as soon as it is measured (every repeat), so a
run stopped at its cap keeps what it measured:

1. ``feedline``: FeedLoader as users run it: the default engine without DALI (``--threads``
   worker processes writing into pinned shared memory), the default decoder, the CUDA
   Finisher; then the profile of one more stretch of it (where its time goes);
2. ``gil``: that engine alone under py-spy (bench/scaling.py's method, its mode ``cuda``):
   the GIL the consumer (the training process) and each worker hold per image; left out,
   with its reason, when ``--timeout`` leaves too little for it;
3. ``torchvision``: the ImageNet example's recipe (transforms.v2 on PIL images in the
   workers, float32 normalized there, then copied to the GPU).

The rows run one after the other, each loader closed before the next starts, so one row's
workers never compete with another's for the cores.
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

from bench.common import ROOT, format_table, say, target  # noqa: E402
from bench.gpu import common  # noqa: E402
from bench.streams import forever  # noqa: E402

log = logging.getLogger(__name__)
NAME = "loader_img_s"
TARGET_IMG_S = 10_000
ENGINE = "processes"   # what engine="auto" picks on a CUDA device where DALI is not installed
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
GIL_START_S = 15   # the GIL step beyond its two sampling windows: a fresh loader's start, py-spy's, the end


def feedline_stream(packed: str, args, device: str):
    import torch
    from feedline import FeedLoader, OutputSpec
    loader = FeedLoader(packed, batch_size=args.batch_size, shuffle=True, train=True, size=224,
                        num_workers=args.threads, device=device, engine=ENGINE,
                        output=OutputSpec(dtype=torch.bfloat16, channels_last=True), drop_last=True)
    return loader, forever(lambda: loader)


def torchvision_stream(folder: str, args, device: str):
    """DataLoader + ImageFolder (PIL) + transforms.v2, then on the device: bf16, channels_last."""
    import torch
    from torchvision import datasets
    from torchvision.transforms import v2
    steps = [v2.RandomResizedCrop(224, interpolation=v2.InterpolationMode.BILINEAR, antialias=True),
             v2.RandomHorizontalFlip(0.5), v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True),
             v2.Normalize(MEAN, STD), v2.ToPureTensor()]
    data = datasets.ImageFolder(folder, transform=v2.Compose(steps))
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True, num_workers=args.threads,
                                         pin_memory=device.startswith("cuda"), drop_last=True,
                                         persistent_workers=True, generator=torch.Generator().manual_seed(0))

    def to_device(batches):
        for images, labels in batches:
            yield (images.to(device, non_blocking=True).to(torch.bfloat16).contiguous(
                memory_format=torch.channels_last), labels.to(device, non_blocking=True))
    return loader, to_device(forever(lambda: loader))


def check_batch(name: str, batch, args, device: str) -> None:
    import torch
    images, labels = batch
    if (tuple(images.shape) != (args.batch_size, 3, 224, 224) or images.dtype != torch.bfloat16
            or images.device.type != device or not images.is_contiguous(memory_format=torch.channels_last)
            or len(labels) != args.batch_size):
        raise RuntimeError(f"{name} gave {tuple(images.shape)} {images.dtype} on {images.device}: not the same work")


def measure_row(name: str, make, args, device: str, report) -> tuple[list[float], str | None, object]:
    """Start one loader, check its first batch, warm it up, then ``--repeats`` timed runs of
    ``--batches``; ``report(samples)`` after each. (samples, why it failed, the open loader)."""
    samples: list[float] = []
    loader = None
    try:
        loader, stream = make()
        check_batch(name, next(stream), args, device)
        for _ in range(args.warmup - 1):
            next(stream)
        common.timed_repeats(samples, name, stream, args, device, report, say)
        stream.close()
        return samples, None, loader
    except Exception as exc:  # torchvision missing, a worker killed: said in the JSON, the others still run
        log.debug("%s failed", name, exc_info=True)
        return samples, f"{type(exc).__name__}: {exc}", loader


def gil_figures(args, device: str, left_s: float) -> dict:
    """The default engine alone under py-spy, as bench/scaling.py measures it (mode ``cuda``:
    this benchmark's work): the GIL its consumer and each worker hold per image, or why not."""
    need = 2 * args.gil_seconds + GIL_START_S
    if left_s < need:
        return {"reason": f"not run: {left_s:.0f} s left of --timeout, {need:.0f} s needed"}
    with tempfile.TemporaryDirectory(prefix="loader-gil-") as tmp:
        out = Path(tmp) / "gil.json"
        cmd = [sys.executable, str(ROOT / "bench" / "scaling.py"), "--store", args.data, "--engines", ENGINE,
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
    device = common.device_for(args, data=args.data, folder=args.folder, imports=("torchvision",))
    say(f"{NAME}: engine {ENGINE!r}, batch {args.batch_size}, {args.threads} workers, device {device}, "
        f"{args.batches} timed batches x {args.repeats} repeats")
    params = {k: v for k, v in vars(args).items() if k != "out"} | {"device": device, "gpu": common.gpu_name()}
    state = {"rows": {}, "profile": None, "diagnosis": None, "gil": {"reason": "not measured yet"}}

    def write() -> Path:
        rows = list(state["rows"].values())
        rate = {r["name"]: r["images_per_s"] for r in rows}
        for row in rows:
            row["x_torchvision"] = (row["images_per_s"] / rate["torchvision"]
                                    if row["images_per_s"] and rate.get("torchvision") else None)
        return common.write(NAME, rows, params, args.out, engine=f"{ENGINE} ({args.threads} worker processes)",
                            targets=[target("FeedLoader img/s (the default engine), bf16 channels_last on the GPU",
                                            rate.get("feedline"), TARGET_IMG_S, unit=" img/s")],
                            profile=state["profile"], diagnosis=state["diagnosis"], gil=state["gil"],
                            loader_img_s=rate.get("feedline"), torchvision_img_s=rate.get("torchvision"))

    def row_reporter(name: str):
        def report(samples, reason=None):
            state["rows"][name] = {"name": name, "images_per_s": common.median(samples), "samples": list(samples),
                                   "reason": reason}
            write()
        return report

    report = row_reporter("feedline")
    samples, reason, loader = measure_row("feedline", lambda: feedline_stream(args.data, args, device), args,
                                          device, report)
    report(samples, reason)
    if loader is not None:
        if reason is None:   # where its time goes, in a fresh epoch
            per_epoch = len(loader)
            state["profile"] = common.profiled_run(loader, max(1, min(args.batches, per_epoch - 2)),
                                                   min(2, per_epoch - 1), device, args.threads)
            state["diagnosis"] = common.diagnose(state["profile"], args.threads)
            write()
        loader.close()   # its workers go before the GIL step and the next row
    if args.gil_seconds:
        left = (args.timeout - (time.monotonic() - started)) if args.timeout else float("inf")
        state["gil"] = gil_figures(args, device, left)
        write()
    else:
        state["gil"] = {"reason": "not asked (--gil-seconds 0)"}
    if args.folder:
        report = row_reporter("torchvision")
        samples, reason, loader = measure_row("torchvision", lambda: torchvision_stream(args.folder, args, device),
                                              args, device, report)
        report(samples, reason)
        del loader   # the DataLoader's persistent workers go with it
    path = write()
    say(format_table(list(state["rows"].values()), [("loader", "name"), ("img/s", "images_per_s"),
                                                     ("x torchvision", "x_torchvision"), ("note", "reason")]))
    if state["diagnosis"]:
        say(f"feedline: {state['diagnosis']}")
    gil = state["gil"]
    say(f"GIL: consumer {gil.get('consumer_gil_ms_per_image')} ms/img, worker {gil.get('worker_gil_ms_per_own_image')}"
        f" ms/own img" if gil.get("reason") is None else f"GIL step: {gil['reason']}")
    say(f"wrote {path}")
    return {"path": str(path), "rows": list(state["rows"].values()), "gil": gil}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_common(p)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--batches", type=int, default=40, help="timed batches per repeat (default 40)")
    p.add_argument("--drain", type=int, default=4, help="untimed batches before the first repeat (default 4)")
    p.add_argument("--warmup", type=int, default=4, help="batches consumed once after a loader starts")
    p.add_argument("--gil-seconds", type=float, default=0,
                   help="then the default engine under py-spy for 2 x this many seconds (default 0: not run)")
    p.add_argument("--timeout", type=float, help="seconds for the whole run: the GIL step only if it fits")
    args = p.parse_args(argv)
    common.apply_smoke(args)
    common.positive(p, args, "batch_size", "batches", "threads", "repeats", "warmup")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
