"""Does the CUDA-stream prefetcher hide the copy of batch k+1 behind step k?

    python bench/prefetch.py [--batch 256] [--size 224] [--steps 50] [--compute-ms 20]

Feeds one pinned uint8 N x H x W x 3 batch (already decoded: this isolates the copy
and normalize from decoding) to a stand-in training step (matrix products sized to
take about --compute-ms on the GPU), three ways, timed with CUDA events in one run:
compute alone, copy+normalize then compute on one stream (serial), and feedline's
CudaPrefetcher (copy on a side stream, the consumer waits on an event). Prints the
time per step and the share of the copy that was hidden; writes
bench/results/prefetch.json. Without CUDA it says so and writes the reason.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # `python bench/prefetch.py`: the repository root, not bench/, on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench import common  # noqa: E402

import torch  # noqa: E402

from feedline.config import OutputSpec  # noqa: E402
from feedline.sources.prefetcher import CudaPrefetcher, _normalizer, convert  # noqa: E402


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--compute-ms", type=float, default=20.0)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    params = vars(a)
    if not torch.cuda.is_available():
        reason = "no CUDA device: the prefetcher's overlap needs a GPU"
        common.say(reason)
        common.write_results("prefetch", [], params, a.out, skipped=reason)
        return 0

    device = torch.device("cuda", torch.cuda.current_device())
    output = OutputSpec(dtype=torch.bfloat16, device=str(device))
    pinned = torch.randint(0, 256, (a.batch, a.size, a.size, 3), dtype=torch.uint8).pin_memory()
    labels = torch.zeros(a.batch, dtype=torch.int64).pin_memory()
    weights = torch.randn(2048, 2048, device=device) / 64
    repeats = calibrate(weights, pinned[:1].to(device), a.compute_ms)
    norm = _normalizer(output, device)
    prefetcher = CudaPrefetcher(output)

    def compute_only(n):
        images = convert(pinned.to(device), output, norm)
        for _ in range(n):
            stand_in_step(weights, images, repeats)

    def copy_only(n):
        for _ in range(n):
            convert(pinned.to(device, non_blocking=True), output, norm)

    def serial(n):
        for _ in range(n):
            images = convert(pinned.to(device, non_blocking=True), output, norm)
            stand_in_step(weights, images, repeats)

    def prefetched(n):
        pending = prefetcher.submit(pinned, labels, 0)
        for _ in range(n):
            ahead = prefetcher.submit(pinned, labels, 0)   # batch k+1 copies during step k
            images, _ = prefetcher.finish(pending)
            stand_in_step(weights, images, repeats)
            pending = ahead
        prefetcher.finish(pending)

    times = {name: per_step_ms(fn, a.steps) for name, fn in
             [("compute only", compute_only), ("copy+normalize only", copy_only),
              ("serial (one stream)", serial), ("feedline prefetcher", prefetched)]}
    copy, compute = times["copy+normalize only"], times["compute only"]
    hidden = (times["serial (one stream)"] - times["feedline prefetcher"]) / max(copy, 1e-9)
    rows = [{"name": k, "ms_per_step": v} for k, v in times.items()]
    common.say(common.format_table(rows, [("", "name"), ("ms/step", "ms_per_step")]))
    common.say(f"copy hidden behind compute: {hidden:.0%} (copy {copy:.2f} ms, compute {compute:.2f} ms, "
               f"batch {a.batch} x {a.size}x{a.size}, bf16, channels_last)")
    path = common.write_results("prefetch", rows, params, a.out, hidden_fraction=hidden,
                                images_per_s_copy=a.batch / (copy / 1e3))
    common.say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
