"""Where an augmentation recipe's time goes: RandomResizedCrop 224 + flip, then RandAugment(2, 9),
RandomErasing(0.25) and timm's Mixup(0.8, CutMix 1.0) on the batch, each alone and all together,
for FeedLoader and for torch DataLoader + PIL doing the same.

Loader rows (img/s, in interleaved rounds, the median of each row kept):
- ``dataloader`` / ``feedloader``: the plain crop + flip to normalized float32.
- ``...+randaugment``, ``...+erasing``, ``...+mixup``: one part of the recipe added;
  ``...+recipe``: all three. DataLoader runs them as torchvision and timm do (bench/augment_pil.py:
  RandAugment on the PIL image and erasing on the normalized tensor in the workers, Mixup on the
  collated batch); FeedLoader with ``transforms=`` / ``batch_transforms=`` (the per-sample ops
  on the workers' uint8 crops, the mixer on the finished batch).
Op rows: CPU ms per 224 x 224 image of each op alone on one thread, feedline's host path beside
PIL's (bench/op_costs.py); ``ops:*`` rows: the recipe's per-sample ops alone, img/s on one thread.

Targets: feedloader+recipe over dataloader+recipe >= 3x; feedloader+recipe over feedloader
>= 0.75x. --quick writes under bench/results/quick and judges nothing; --save writes the
committed bench/results/augment.json.

Usage: python bench/augment.py [DATA] [--quick | --save] [--n N] [--batches B] [--seconds S] [--workers W]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import op_costs  # noqa: E402
from bench.args import check_output_flags, output_arguments  # noqa: E402
from bench.augment_pil import erase_tensor, pil_randaugment, recipe_dataloader_stream  # noqa: E402
from bench.baselines import dataloader_stream, feedloader_stream  # noqa: E402
from bench.common import format_table, ratio, target, targets_table, write_results  # noqa: E402
from bench.data import prepare_data  # noqa: E402
from bench.streams import forever, measure, plain_stream  # noqa: E402

PARTS = {"randaugment": (True, False, False), "erasing": (False, True, False), "mixup": (False, False, True),
         "recipe": (True, True, True)}   # name -> (RandAugment(2, 9), RandomErasing(0.25), Mixup)


def feedloader_parts_stream(packed: str, batch_size: int, workers: int, classes: int, randaugment: bool,
                            erasing: bool, mixup: bool):
    """FeedLoader with the chosen parts: the per-sample ops in the workers, the mixer here."""
    from feedline.core.config import TransformSpec
    from feedline.loading.loader import FeedLoader
    from feedline.transforms import Mixup, RandAugment, RandomErasing
    per_sample = [RandAugment(2, 9)] * randaugment + [RandomErasing(0.25)] * erasing
    loader = FeedLoader(packed, batch_size=batch_size, shuffle=True, train=True, size=224, num_workers=workers,
                        device="cpu", drop_last=True,
                        transforms=TransformSpec(per_sample, [Mixup(0.8, 1.0, num_classes=classes)] * mixup))
    stream = plain_stream(forever(lambda: loader), "cpu")
    close_stream = stream.close

    def close():
        close_stream()
        loader.close()
    stream.close = close
    return stream


def loader_makers(data, batch_size: int, workers: int, classes: int) -> dict:
    folder, packed = str(data.folder), str(data.packed)
    makers = {"dataloader": lambda: dataloader_stream(folder, batch_size, workers, "cpu"),
              "feedloader": lambda: feedloader_stream(packed, batch_size, workers, "cpu")}
    for part, flags in PARTS.items():
        makers[f"dataloader+{part}"] = lambda f=flags: recipe_dataloader_stream(folder, batch_size, workers,
                                                                                  classes, *f)
        makers[f"feedloader+{part}"] = lambda f=flags: feedloader_parts_stream(packed, batch_size, workers,
                                                                                 classes, *f)
    return makers


def loader_rates(makers: dict, batches: int, repeats: int) -> dict[str, list[float]]:
    """img/s of every row in ``repeats`` rounds over the rows (a slow spell hits every row)."""
    measured: dict[str, list[float]] = {name: [] for name in makers}
    for _ in range(repeats):
        for name, make in makers.items():
            stream = make()
            try:
                for _ in range(2):
                    next(stream.batches)
                m = measure(stream.batches, batches, 2, "cpu")
            finally:
                stream.close()
            measured[name].append(m["images"] / m["seconds"])
    return measured


def recipe_ops_rates(images: list[np.ndarray], seconds: float) -> dict:
    """img/s of the recipe's per-sample ops alone on one thread: PIL as DataLoader runs them,
    feedline's host path with parameters drawn per batch of 64 as an engine does."""
    from PIL import Image
    from feedline.transforms import RandAugment, RandomErasing, SampleTransforms
    ops = SampleTransforms([RandAugment(2, 9), RandomErasing(0.25)])
    mean, std = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1), torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

    def pil(i):
        x = torch.from_numpy(np.array(pil_randaugment(Image.fromarray(images[i % len(images)])))).permute(2, 0, 1)
        erase_tensor(x.float().div_(255).sub_(mean).div_(std))

    drawn = {}

    def ours(i):
        if i % 64 == 0:
            drawn["batch"] = ops.draw(0, 0, np.arange(i, i + 64))
        ops.apply_drawn(images[i % len(images)], drawn["batch"], i % 64, 0, 0, i)
    out = {}
    for name, fn in (("ops:pil", pil), ("ops:feedline", ours)):
        count, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            fn(count)
            count += 1
        out[name] = count / (time.perf_counter() - t0)
    return out


def op_rows(calls: int, rounds: int) -> list[dict]:
    """CPU ms per image of each op alone, feedline and PIL (bench/op_costs.py)."""
    best = op_costs.measure(calls, rounds)
    return [{"op": name, "feedline_ms": ms, "pil_ms": best["pil"].get(name),
             "pil_over_feedline": ratio(best["pil"].get(name), ms)} for name, ms in best["feedline"].items()]


BASE = {"dataloader+recipe": "dataloader", "feedloader+recipe": "feedloader", "ops:feedline": "ops:pil"}
BASE.update({f"{loader}+{part}": loader for loader in ("dataloader", "feedloader") for part in PARTS})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench/augment.py", description=__doc__.split("\n\n")[0])
    p.add_argument("data", nargs="?")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--n", type=int, default=None, help="images generated without DATA (default 2000)")
    p.add_argument("--batches", type=int, default=None, help="timed batches per loader (default 30)")
    p.add_argument("--batch-size", type=int, default=None, help="default 64")
    p.add_argument("--workers", type=int, default=2, help="DataLoader and FeedLoader workers")
    p.add_argument("--seconds", type=float, default=None, help="seconds per ops:* row (default 5)")
    p.add_argument("--repeats", type=int, default=None, help="rounds over the loader rows, interleaved; "
                   "each row's median is kept (default 3; 1 with --quick)")
    p.add_argument("--op-calls", type=int, default=None, help="calls per op and round of the op table (default 50)")
    output_arguments(p, "augment")
    a = p.parse_args(argv)
    check_output_flags(p, a)
    batches, batch_size = a.batches or (3 if a.quick else 30), a.batch_size or (8 if a.quick else 64)
    seconds = a.seconds or (0.5 if a.quick else 5.0)
    repeats = a.repeats or (1 if a.quick else 3)
    op_calls, op_rounds = a.op_calls or (1 if a.quick else 50), 1 if a.quick else 5
    torch.set_num_threads(1)
    data = prepare_data(a.data, n=a.n or (64 if a.quick else 2000))
    from feedline.stores import open_dataset
    with open_dataset(data.packed) as store:
        classes = int(np.max(store.labels)) + 1
    measured = loader_rates(loader_makers(data, batch_size, a.workers, classes), batches, repeats)
    rows = [{"name": name, "img_s": float(np.median(v)), "runs": v, "reason": ""} for name, v in measured.items()]
    photos = [op_costs.photo(i) for i in range(8)]
    rows += [{"name": k, "img_s": v, "reason": "one thread, 224 x 224, no decode"}
             for k, v in recipe_ops_rates(photos, seconds).items()]
    by = {r["name"]: r["img_s"] for r in rows}
    for r in rows:
        r["vs"] = BASE.get(r["name"], "")
        r["ratio"] = ratio(r["img_s"], by.get(r["vs"])) if r["vs"] else None
    print(format_table(rows, [("row", "name"), ("img/s", "img_s"), ("vs", "vs"), ("ratio", "ratio"),
                              ("note", "reason")]))
    ops = op_rows(op_calls, op_rounds)
    print(format_table(ops, [("op (224 x 224, one thread)", "op"), ("feedline CPU ms", "feedline_ms"),
                             ("PIL CPU ms", "pil_ms"), ("PIL / feedline", "pil_over_feedline")]))
    targets = [target("feedloader+recipe over dataloader+recipe",
                      ratio(by["feedloader+recipe"], by["dataloader+recipe"]), 3.0),
               target("feedloader+recipe over feedloader", ratio(by["feedloader+recipe"], by["feedloader"]), 0.75)]
    print(targets_table(targets, quick=a.quick))
    path = write_results("augment", rows, params={"batches": batches, "batch_size": batch_size, "repeats": repeats,
                                                  "workers": a.workers, "op_calls": op_calls, "op_rounds": op_rounds,
                                                  "data": data.to_dict()}, out=a.out,
                         quick=a.quick, save=a.save, targets=targets, ops=ops)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
