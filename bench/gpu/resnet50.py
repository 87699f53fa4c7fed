"""resnet50_real_over_synthetic: does FeedLoader keep the GPU busy? `feedline train`
ResNet-50, bf16 AMP, channels_last, batch 256, on the real photos through FeedLoader (its
default engine), then the same model, options and number of steps on device-resident
synthetic tensors (the trainer's own --synthetic-steps measurement). Target real /
synthetic >= 0.95, each over at least 60 timed steps after the trainer's warm-up.

    python bench/gpu/resnet50.py --data photos.lmdb --out resnet50.json [--epochs 1]

On the GPU check's data (16,384 records) one epoch is 64 steps, 61 of them timed: one long
epoch, as on ImageNet, rather than several short ones whose starts would weigh on the
figure far more than an ImageNet epoch's start does. Reads the trainer's OUT/metrics.jsonl
while it runs and rewrites the JSON every few seconds (the step windows so far), so a run
stopped at its cap keeps what it measured; at the end, both img/s from its summary and the
data-wait share of each epoch.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/gpu/resnet50.py`: the repository root on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.common import say, target  # noqa: E402
from bench.gpu import common  # noqa: E402

NAME = "resnet50"
TARGET = 0.95
MIN_TIMED_STEPS = 60


def read_events(metrics: Path) -> list[dict]:
    if not metrics.is_file():
        return []
    events = []
    for line in metrics.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:   # a line being written
            pass
    return events


def warmup_steps() -> int:
    """The steps the trainer leaves out of its throughput (compilation, cudnn autotuning)."""
    try:
        from feedline.train.setup import WARMUP_MICRO
    except ImportError:
        return 3
    return WARMUP_MICRO


def train_command(args, images: int, run_dir: Path) -> list[str]:
    steps = images // args.batch_size * args.epochs    # training drops the last partial batch
    cmd = [sys.executable, "-m", "feedline", "train", args.data, "--arch", args.arch, "--batch-size",
           str(args.batch_size), "--epochs", str(args.epochs), "--threads", str(args.threads),
           "--synthetic-steps", str(steps), "--out", str(run_dir), "--log-every", "8", "--no-progress",
           "--warmup-epochs", "0", "--color-jitter", "0"]   # the data path: crop, flip, normalize only
    if args.cpu_smoke:
        return cmd + ["--size", "32", "--device", "cpu", "--autocast", "off"]
    return cmd + ["--autocast", "bf16", "--channels-last", "--device", "cuda"]


def diagnose(share: float | None, epochs: list[dict]) -> str | None:
    if share is None or share >= TARGET:
        return None
    wait = max((e.get("data_wait") or 0.0 for e in epochs), default=0.0)
    if wait > 1 - TARGET:
        return (f"input-bound: the step loop waited for data {wait:.0%} of an epoch; the loader delivers less "
                "than the model consumes (see loader_img_s's profile)")
    return (f"the loop waited for data only {wait:.0%} of the time, so the loss is elsewhere: GPU contention "
            "between the loader's copy/normalize and the model, or the first epoch's warm-up")


def figures(events: list[dict], synthetic_steps: int) -> dict:
    summary = next((e for e in reversed(events) if e.get("event") == "summary"), {})
    epochs = [e for e in events if e.get("event") == "epoch"]
    warm = warmup_steps()
    real_timed = max(0, summary["steps"] - warm) if summary.get("steps") else None
    share = summary.get("pipeline_share")
    return {"real_images_per_s": summary.get("real_images_per_s"),
            "synthetic_images_per_s": summary.get("synthetic_images_per_s"),
            "resnet50_real_over_synthetic": share, "epochs": epochs, "diagnosis": diagnose(share, epochs),
            "timed_steps": min(real_timed, synthetic_steps - warm) if real_timed is not None else None,
            "windows": [{k: e.get(k) for k in ("step", "images_per_s", "step_s", "data_wait", "gpu_mem_gib")}
                        for e in events if e.get("event") == "step"]}


def run(args) -> dict:
    from feedline.stores import open_dataset
    with open_dataset(args.data) as store:
        images = len(store)
    run_dir = Path(args.out).with_name(Path(args.out).stem + "-run")
    cmd = train_command(args, images, run_dir)
    synthetic_steps = images // args.batch_size * args.epochs
    params = {k: v for k, v in vars(args).items() if k != "out"} | {"images": images, "gpu": common.gpu_name()}
    say(f"{NAME}: " + " ".join(cmd))

    def write(returncode: int | None, seconds: float, error: str | None = None) -> Path:
        found = figures(read_events(run_dir / "metrics.jsonl"), synthetic_steps)
        measured = found["resnet50_real_over_synthetic"] if (found["timed_steps"] or 0) >= MIN_TIMED_STEPS else None
        rows = [{"name": "real (FeedLoader)", "images_per_s": found["real_images_per_s"]},
                {"name": "synthetic (device-resident)", "images_per_s": found["synthetic_images_per_s"]}]
        return common.write(NAME, rows, params, args.out, command=cmd, returncode=returncode, seconds=seconds,
                            running=returncode is None, error=error, **found,
                            targets=[target(f"ResNet-50 real / synthetic img/s, >= {MIN_TIMED_STEPS} timed steps "
                                            "each", measured, TARGET, unit="")])

    t0 = time.perf_counter()
    write(None, 0.0)
    proc = common.run_polling(cmd, args.timeout, every_s=3.0,
                              on_poll=lambda: write(None, time.perf_counter() - t0))
    seconds = time.perf_counter() - t0
    error = None if proc.returncode == 0 else proc.stdout[-3000:]
    path = write(proc.returncode, seconds, error)
    result = json.loads(path.read_text())
    if error:
        say(error)
    share = result["resnet50_real_over_synthetic"]
    say(f"real {result['real_images_per_s'] or 0:,.0f} img/s, synthetic {result['synthetic_images_per_s'] or 0:,.0f}"
        f" img/s, real/synthetic {share if share is not None else float('nan'):.3f} over {result['timed_steps']} "
        "timed steps; data wait per epoch: " + ", ".join(f"{e.get('data_wait', 0):.1%}" for e in result["epochs"]))
    say(f"wrote {path}")
    return {"path": str(path), "returncode": proc.returncode, "share": share}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_common(p)
    p.add_argument("--arch", default="resnet50")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--epochs", type=int, default=1,
                   help="epochs of real data (default 1: each epoch restarts the loader, a stall that "
                        "a 64-step epoch would weigh far more than an ImageNet epoch does)")
    p.add_argument("--timeout", type=float, default=400, help="seconds before the training run is stopped")
    args = p.parse_args(argv)
    if args.cpu_smoke:
        args.arch, args.batch_size, args.epochs, args.threads = "tiny", 8, 1, 2
    common.positive(p, args, "batch_size", "epochs", "threads")
    common.device_for(args, data=args.data, imports=("torchvision",))
    result = run(args)
    return 0 if result["returncode"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
