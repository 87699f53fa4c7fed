"""resnet50_real_over_synthetic: does FeedLoader keep the GPU busy? `feedline train`
ResNet-50, bf16 AMP, channels_last, batch 256, on the real photos through FeedLoader, then
the same model, options and number of steps on device-resident synthetic tensors (the
trainer's own --synthetic-steps measurement). Target real / synthetic >= 0.95.

    python bench/gpu/resnet50.py --data photos.lmdb --out resnet50.json [--epochs 1]

Reads the trainer's OUT/metrics.jsonl: both img/s from its summary, the data-wait share
of each epoch (the time the step loop spent waiting for the loader) for the profile.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/gpu/resnet50.py`: the repository root on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.common import say, target, write_results  # noqa: E402
from bench.gpu import common  # noqa: E402

NAME = "resnet50"
TARGET = 0.95


def read_events(metrics: Path) -> list[dict]:
    if not metrics.is_file():
        return []
    return [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]


def train_command(args, images: int, run_dir: Path) -> list[str]:
    steps = images // args.batch_size * args.epochs    # training drops the last partial batch
    cmd = [sys.executable, "-m", "feedline", "train", args.data, "--arch", args.arch, "--batch-size",
           str(args.batch_size), "--epochs", str(args.epochs), "--threads", str(args.threads),
           "--synthetic-steps", str(steps), "--out", str(run_dir), "--log-every", "10", "--no-progress",
           "--warmup-epochs", "0", "--color-jitter", "0"]   # the data path: crop, flip, normalize only
    cmd += ["--decoder", args.decoder]
    if args.cpu_smoke:
        return cmd + ["--size", "32", "--device", "cpu", "--autocast", "off"]
    return cmd + ["--autocast", "bf16", "--channels-last", "--device", "cuda"]


def diagnose(share: float | None, epochs: list[dict]) -> str | None:
    if share is None or share >= TARGET:
        return None
    wait = max((e.get("data_wait") or 0.0 for e in epochs), default=0.0)
    if wait > 1 - TARGET:
        return (f"input-bound: the step loop waited for data {wait:.0%} of an epoch; the loader delivers less "
                "than the model consumes (see loader_img_s's profile for the decode threads)")
    return (f"the loop waited for data only {wait:.0%} of the time, so the loss is elsewhere: GPU contention "
            "between the loader's copy/normalize and the model, or the first epoch's warm-up")


def run(args) -> dict:
    from feedline.stores import open_dataset
    with open_dataset(args.data) as store:
        images = len(store)
    run_dir = Path(args.out).with_name(Path(args.out).stem + "-run")
    cmd = train_command(args, images, run_dir)
    say(f"{NAME}: " + " ".join(cmd))
    t0 = time.perf_counter()
    proc = common.run_for(cmd, args.timeout)   # stopped at --timeout: what it logged so far still counts
    seconds = time.perf_counter() - t0
    events = read_events(run_dir / "metrics.jsonl")
    summary = next((e for e in reversed(events) if e.get("event") == "summary"), {})
    epochs = [e for e in events if e.get("event") == "epoch"]
    real, synthetic = summary.get("real_images_per_s"), summary.get("synthetic_images_per_s")
    share = summary.get("pipeline_share")
    if proc.returncode != 0:
        say(proc.stdout[-3000:] + proc.stderr[-3000:])
    rows = [{"name": "real (FeedLoader)", "images_per_s": real},
            {"name": "synthetic (device-resident)", "images_per_s": synthetic}]
    say(f"real {real or 0:,.0f} img/s, synthetic {synthetic or 0:,.0f} img/s, real/synthetic "
        f"{share if share is not None else float('nan'):.3f}; data wait per epoch: "
        + ", ".join(f"{e.get('data_wait', 0):.1%}" for e in epochs))
    path = write_results(
        NAME, rows, {k: v for k, v in vars(args).items() if k != "out"} | {"images": images, "gpu": common.gpu_name()},
        args.out, command=cmd, returncode=proc.returncode, seconds=seconds,
        error=None if proc.returncode == 0 else (proc.stderr or proc.stdout)[-2000:],
        real_images_per_s=real, synthetic_images_per_s=synthetic, resnet50_real_over_synthetic=share,
        epochs=epochs, diagnosis=diagnose(share, epochs),
        targets=[target("ResNet-50 real / synthetic img/s", share, TARGET, unit="")])
    say(f"wrote {path}")
    return {"path": str(path), "returncode": proc.returncode, "share": share}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_common(p)
    p.add_argument("--arch", default="resnet50")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--epochs", type=int, default=1,
                   help="epochs of real data (default 1: each epoch restarts the loader, a stall that "
                        "a 39-step epoch would weigh 100 times more than an ImageNet epoch does)")
    p.add_argument("--decoder", help="the loader's decoder (default: the default CPU decoder on --threads "
                                      "threads; 'auto' would mean DALI wherever DALI is installed)")
    p.add_argument("--timeout", type=float, default=400, help="seconds before the training run is stopped")
    args = p.parse_args(argv)
    if args.cpu_smoke:
        args.arch, args.batch_size, args.epochs, args.threads = "tiny", 8, 1, 2
    args.decoder = args.decoder or common.cpu_decoder()
    common.positive(p, args, "batch_size", "epochs", "threads")
    if not args.cpu_smoke:
        common.device_for(args)
    result = run(args)
    return 0 if result["returncode"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
