"""What mixing a finished CPU batch costs the training process: ms per batch for timm's Mixup
(MixUp, CutMix, mode "elem" with both) and torchvision's MixUp and CutMix, the whole-batch
way (``mix.mix_batch``: a partner copy, two products and a sum over the whole batch; what
devices run) against the CPU's pass a pair of rows at a time (``mix_rows``), on the same draw.

    python bench/mix.py [--batch 64,256] [--size 224] [--rounds R] [--quick]

Each row: the batch's images only (the targets are the same small sum either way), float32
N x 3 x S x S, torch on one thread (``--threads``), in interleaved rounds over batches that do not fit in
the cache together; the min and the median of the rounds. ``python ms``: the same calls on a
batch of 8 x 8 samples, where the arithmetic is nothing: the time the call holds the GIL. A
last row per batch size: one in-place multiply over the batch, the floor of any mixing that
reads and writes each pixel once.
Indicative only on a shared machine. Writes bench/results/local/mix.json (or ``--out``).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/mix.py`: the repository root on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import numpy as np  # noqa: E402

from bench.args import check_output_flags, output_arguments  # noqa: E402
from bench.common import format_table, ratio, say, write_results  # noqa: E402

NAME = "mix"


def mixers() -> dict:
    from feedline.transforms import CutMix, Mixup, MixUp
    return {"timm Mixup (MixUp)": Mixup(0.8, 0.0, num_classes=10),
            "timm Mixup (CutMix)": Mixup(0.0, 1.0, num_classes=10),
            "timm Mixup elem": Mixup(0.8, 1.0, mode="elem", num_classes=10),
            "torchvision MixUp": MixUp(0.8, num_classes=10),
            "torchvision CutMix": CutMix(1.0, num_classes=10)}


def ways(mixer, n: int, size: int) -> dict:
    """The two ways to mix a batch of ``n``, each a function of the images, on one draw (the
    first draw of seed 0 whose lambda is within 0.3..0.7, so that a box covers about half)."""
    from feedline.transforms import mix, mix_rows
    from feedline.transforms.scratch import Scratch
    params = next(p for p in (mixer.draw(seed, 0, np.arange(n), size, size) for seed in range(1000))
                  if 0.3 <= float(np.median(p["lam"])) <= 0.7)
    one_draw = mixer.mode == "batch"
    partners = mixer.partners(n, "cpu")
    batch_scratch, rows_scratch = (Scratch(), Scratch()), Scratch()

    def rows(x):
        draw = mix_rows.RowDraw.of(params["lam"], params["cutmix"], params["boxes"], one_draw)
        return mix_rows.mix_rows(x, mixer.PAIRING, draw, rows_scratch)
    return {"whole batch (before)": lambda x: mix.mix_batch(x, partners, params, one_draw, batch_scratch),
            "rows (after)": rows}, float(np.median(params["lam"]))


def python_ms(fn, n: int, repeats: int = 20) -> float:
    """ms of one call on n tiny samples: the Python and dispatch time, the GIL held."""
    import torch
    x = torch.randn(n, 3, 8, 8)
    fn(x)
    started = time.thread_time()
    for _ in range(repeats):
        fn(x)
    return (time.thread_time() - started) / repeats * 1e3


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", default="64,256", help="batch sizes, comma-separated (default 64,256)")
    p.add_argument("--size", type=int, default=224, help="image side (default 224)")
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch's threads, which the whole-batch way may use (default 1; the rows' way uses one)")
    p.add_argument("--quick", action="store_true", help="a tiny run that finishes in seconds")
    output_arguments(p, NAME)
    args = p.parse_args(argv)
    check_output_flags(p, args)
    batches = [int(b) for b in args.batch.split(",")]
    if args.quick:
        batches, args.size, args.rounds = [8], 32, 2
    import torch
    torch.set_num_threads(args.threads)   # 1: the consumer's own thread, what the training step waits for
    results = []
    for n in batches:
        copies = max(2, -(-64 * 2 ** 20 // (n * 3 * args.size ** 2 * 4)))   # >= 64 MB: no batch stays in cache
        inputs = [torch.randn(n, 3, args.size, args.size) for _ in range(copies)]
        rows = {}
        for name, mixer in mixers().items():
            fns, lam = ways(mixer, n, args.size)
            for way, fn in fns.items():
                rows[(name, way)] = (fn, lam, [])
        rows[("-", "one pass (x.mul_): the floor")] = (lambda x: x.mul_(1.0), float("nan"), [])
        for fn, _, _ in rows.values():   # warm: the scratch allocated once, as in a run
            fn(inputs[0])
        calls = 0
        for _ in range(args.rounds):
            for fn, _, times in rows.values():
                x = inputs[calls % copies]   # the batch mixed least recently
                calls += 1
                started = time.perf_counter()
                fn(x)
                times.append((time.perf_counter() - started) * 1e3)
        for (name, way), (fn, lam, times) in rows.items():
            tiny = ways(mixers()[name], n, 8)[0][way] if name in mixers() else fn
            results.append({"mixer": name, "way": way, "batch": n, "lambda": None if name == "-" else lam,
                            "ms_min": min(times), "ms_median": float(np.median(times)),
                            "python_ms": python_ms(tiny, n)})
        before = {r["mixer"]: r["ms_min"] for r in results if r["batch"] == n and r["way"].endswith("(before)")}
        for r in results:
            if r["batch"] == n and r["mixer"] in before:
                r["x_before"] = ratio(r["ms_min"], before[r["mixer"]])
        del inputs
    say(format_table(results, [("mixer", "mixer"), ("way", "way"), ("batch", "batch"), ("lambda", "lambda"),
                               ("ms min", "ms_min"), ("ms median", "ms_median"), ("x before", "x_before"),
                               ("python ms", "python_ms")]))
    say(f"(float32 N x 3 x {args.size} x {args.size}; {args.rounds} interleaved rounds; torch threads {args.threads}; "
        f"{os.cpu_count()} cores, shared)")
    write_results(NAME, results, {"batches": batches, "size": args.size, "rounds": args.rounds,
                                  "threads": args.threads}, out=args.out,
                  quick=args.quick, save=args.save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
