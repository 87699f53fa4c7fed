"""prefetch_overlap: the share of the host-to-device copy (and normalization) that
feedline's CUDA Finisher hides behind the training step.

    python bench/gpu/prefetch_overlap.py --out prefetch_overlap.json [--batch 256 --compute-ms 20]

One pinned uint8 N x 224 x 224 x 3 batch (already decoded: decoding is not measured here)
feeds a stand-in training step, matrix products sized to take about --compute-ms on
the GPU. Per step, timed with CUDA events after a warm-up: compute alone; copy + normalize
alone; both on one stream (serial); and feedline's CudaFinisher (copy of batch k+1 on
its side stream while step k runs). Hidden share = (serial - prefetched) / copy: 1.0 when
the copy costs the step nothing, 0 when it is fully serialized. The JSON is rewritten after
each of the four rows. Without CUDA it writes why (--cpu-smoke) or exits with NO_CUDA.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # `python bench/gpu/prefetch_overlap.py`: the repository root on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.common import format_table, say  # noqa: E402
from bench.gpu import common  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from feedline.core.config import OutputSpec  # noqa: E402
from feedline.sources.normalization import normalize_batch  # noqa: E402
from feedline.planning.plan import BatchPlan  # noqa: E402
from feedline.sources.cuda_finisher import CudaFinisher  # noqa: E402
from feedline.sources.slot import Slot  # noqa: E402

NAME = "prefetch_overlap"


def stand_in_step(weights: torch.Tensor, images: torch.Tensor, repeats: int) -> torch.Tensor:
    x = weights
    for _ in range(repeats):
        x = torch.tanh(x @ weights)
    return x.sum() + images.float().mean()


def per_step_ms(run, steps: int) -> float:
    run(3)  # warm-up: allocator, cuBLAS handles
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run(steps)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / steps


def calibrate(weights: torch.Tensor, images: torch.Tensor, target_ms: float) -> int:
    one = per_step_ms(lambda n: [stand_in_step(weights, images, 1) for _ in range(n)], 10)
    return max(1, round(target_ms / max(one, 1e-3)))


def measure(batch: int, size: int, steps: int, compute_ms: float, on_row=lambda times, repeats: None
            ) -> tuple[dict[str, float], int]:
    """ms per step of: the stand-in step alone, copy + normalize alone, both on one stream,
    and feedline's CudaFinisher (copy of batch k+1 on its side stream while step k runs);
    and the step's matmul repeats. Seeded: the same bytes and weights every run."""
    device = torch.device("cuda", torch.cuda.current_device())
    output = OutputSpec(dtype=torch.bfloat16, device=str(device))
    gen = torch.Generator().manual_seed(0)
    pinned = torch.randint(0, 256, (batch, size, size, 3), dtype=torch.uint8, generator=gen).pin_memory()
    labels = torch.zeros(batch, dtype=torch.int64).pin_memory()
    weights = torch.randn(2048, 2048, device=device, generator=torch.Generator(device).manual_seed(0)) / 64
    repeats = calibrate(weights, pinned[:1].to(device), compute_ms)
    finisher = CudaFinisher(output)
    plan = BatchPlan(0, 0, np.arange(batch), np.zeros((batch, 4), np.int64), np.zeros(batch, bool), np.zeros(batch, np.int64))
    slot = Slot(0, pinned, labels, None, (size, size), plan=plan)

    def compute_only(n):
        images = normalize_batch(pinned.to(device).permute(0, 3, 1, 2), output)
        for _ in range(n):
            stand_in_step(weights, images, repeats)

    def copy_only(n):
        for _ in range(n):
            normalize_batch(pinned.to(device, non_blocking=True).permute(0, 3, 1, 2), output)

    def serial(n):
        for _ in range(n):
            images = normalize_batch(pinned.to(device, non_blocking=True).permute(0, 3, 1, 2), output)
            stand_in_step(weights, images, repeats)

    def prefetched(n):
        pending = finisher.finish(slot)
        for _ in range(n):
            ahead = finisher.finish(slot)   # batch k+1 copies during step k
            images, _ = finisher.hand_over(pending)
            stand_in_step(weights, images, repeats)
            pending = ahead
        finisher.hand_over(pending)

    times: dict[str, float] = {}
    for name, fn in [("compute only", compute_only), ("copy+normalize only", copy_only),
                     ("serial (one stream)", serial), ("feedline prefetcher", prefetched)]:
        times[name] = per_step_ms(fn, steps)
        on_row(times, repeats)
    return times, repeats


def figures(times: dict[str, float], args) -> dict:
    """The hidden share and the copy's figures from the rows measured so far."""
    copy, compute = times.get("copy+normalize only"), times.get("compute only")
    hidden = None
    if copy and "feedline prefetcher" in times:
        hidden = (times["serial (one stream)"] - times["feedline prefetcher"]) / max(copy, 1e-9)
    return {"hidden_fraction": hidden, "copy_ms": copy, "compute_ms": compute,
            "copy_normalize_gb_s": args.batch * args.size * args.size * 3 / (copy / 1e3) / 1e9 if copy else None,
            "images_per_s_copy": args.batch / (copy / 1e3) if copy else None}


def run(args) -> dict:
    if args.cpu_smoke:
        reason = "no CUDA device: the overlap of a copy with GPU compute needs a GPU"
        say(f"{NAME}: {reason}")
        path = common.write(NAME, [], vars(args), args.out, skipped=reason)
        return {"path": str(path), "skipped": reason}
    common.device_for(args)   # without CUDA: exits NO_CUDA

    def write(times: dict[str, float], repeats: int):
        rows = [{"name": k, "ms_per_step": v} for k, v in times.items()]
        return common.write(NAME, rows, vars(args) | {"gpu": common.gpu_name(), "matmul_repeats": repeats},
                            args.out, **figures(times, args))
    times, repeats = measure(args.batch, args.size, args.steps, args.compute_ms, on_row=write)
    found = figures(times, args)
    say(format_table([{"name": k, "ms_per_step": v} for k, v in times.items()],
                     [("", "name"), ("ms/step", "ms_per_step")]))
    say(f"copy hidden behind compute: {found['hidden_fraction']:.0%} (copy+normalize {found['copy_ms']:.2f} ms, "
        f"compute {found['compute_ms']:.2f} ms, batch {args.batch} x {args.size}x{args.size}, bf16, channels_last)")
    path = write(times, repeats)
    say(f"wrote {path}")
    return {"path": str(path), "hidden_fraction": found["hidden_fraction"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--cpu-smoke", action="store_true", help="without a GPU: only write why nothing was measured")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--compute-ms", type=float, default=20.0, help="the stand-in step's GPU time (default 20)")
    args = p.parse_args(argv)
    common.positive(p, args, "batch", "size", "steps")
    if not args.compute_ms > 0:
        p.error("--compute-ms must be positive")
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
