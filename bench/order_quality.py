"""Does quasi-random order cost accuracy? The demo's tiny model trained in random and in
quasi-random order, a few seeds each.

    python bench/order_quality.py [--seeds 5] [--epochs 2] [--windows 2,8,16] [--quick]
                                  [--cache-dir DIR] [--out PATH]

Data: the demo's (Makefile `demo`): 600 training and 120 validation photo-like JPEGs of 6
classes, class k cut from photo k, packed class by class (records of a class are
neighbours on disk: the worst case for a page-aware order).

1. The trainer as a user runs it (`feedline train ... --arch tiny --size 96 --batch-size 32
   --order random|quasi-random --seed S`): final validation top-1 and loss per seed. At
   this size the loader's window (16-record blocks x 256) spans the whole data set, so
   quasi-random order is a uniform shuffle here too.
2. Windows smaller than the data set, which a large data set always has: the same model
   and data in a short training loop of this script over the loader's source with blocks
   of 16 and windows of ``--windows`` blocks (32, 128 and 256 records: a batch then draws
   from 2, 8 and 16 places of the file), against random order; SGD with momentum and a
   cosine schedule, as the trainer's ends. Each row also says how many classes a batch
   holds on average. The same small windows again over the images packed in a shuffled
   order (a labels CSV names each file's class): neighbours on disk of mixed classes.

Writes bench/results/local/order_quality.json (bench/results/ with --save). Accuracy is reported, never timed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench.args import check_output_flags, output_arguments  # noqa: E402
from bench.common import ROOT, format_table, say, write_results  # noqa: E402
from bench.data import cache_root  # noqa: E402
from bench.machine import machine_info, machine_line  # noqa: E402

QUICK = {"seeds": 1, "epochs": 1, "train": 60, "val": 24}
SIZE, BATCH, CLASSES, BLOCK = 96, 32, 6, 16


def demo_data(cache_dir, train: int, val: int) -> tuple[str, str]:
    """The demo's packed training and validation sets (made once)."""
    from converters import pack
    from feedline.sample import make_photo_folder
    root = cache_root(cache_dir) / f"order-quality-{train}-{val}"
    out = (root / "train.lmdb", root / "val.h5")
    for (n, seed), path in zip(((train, 0), (val, 1)), out):
        if not path.is_file():
            folder = root / path.stem
            make_photo_folder(str(folder), n=n, classes=CLASSES, seed=seed, photo_per_class=True)
            pack(str(folder), str(path), progress=False)
    return str(out[0]), str(out[1])


def shuffled_pack(cache_dir, train_folder: Path) -> str:
    """The training images packed in a seeded random order (file k of the shuffle named
    k.jpg, its class from a labels CSV): neighbours on disk are of mixed classes."""
    import random
    from converters import pack
    root = train_folder.parent / "shuffled"
    out = root / "train.lmdb"
    if out.is_file():
        return str(out)
    files = sorted(p for p in train_folder.rglob("*.jpg"))
    random.Random(0).shuffle(files)
    (root / "images").mkdir(parents=True, exist_ok=True)
    rows = ["path,label"]
    for k, path in enumerate(files):
        os.link(path, root / "images" / f"{k:05d}.jpg")
        rows.append(f"{k:05d}.jpg,{path.parent.name}")
    (root / "labels.csv").write_text("\n".join(rows) + "\n")
    pack(str(root / "images"), str(out), labels_csv=str(root / "labels.csv"), progress=False)
    return str(out)


def trainer_run(train: str, val: str, order: str, seed: int, epochs: int, out: Path) -> dict:
    cmd = [sys.executable, "-m", "feedline", "train", train, "--val", val, "--arch", "tiny", "--size", str(SIZE),
           "--epochs", str(epochs), "--batch-size", str(BATCH), "--synthetic-steps", "0", "--order", order,
           "--seed", str(seed), "--out", str(out), "--overwrite", "--log-every", "1000", "--no-progress"]
    subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True, text=True)
    with open(out / "metrics.jsonl", encoding="utf-8") as fh:
        final = [json.loads(line) for line in fh if '"summary"' in line][-1]["final"]
    return {"top1": final["top1"], "val_loss": final["val_loss"]}


def loop_run(train: str, val: str, block: int | None, window: int | None, seed: int, epochs: int) -> dict:
    """SGD on the tiny model over the loader's source with this block and window (None:
    random order); top-1 on the validation set, and classes per batch."""
    import torch
    import torch.nn.functional as F

    from feedline import FeedLoader, open_dataset
    from feedline.core.choices import Order
    from feedline.planning.plan import EpochPlan
    from feedline.core.stats import LoaderStats
    from feedline.train.models import build_model
    torch.manual_seed(seed)
    model = build_model("tiny", num_classes=CLASSES).to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-5)
    steps = epochs * (len(open_dataset(train)) // BATCH)   # cosine to zero, as the trainer's schedule ends
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 0.5 * (1 + math.cos(math.pi * k / steps)))
    order = Order.RANDOM if block is None else Order.QUASI_RANDOM
    per_batch = []
    with FeedLoader(train, batch_size=BATCH, shuffle=True, train=True, size=SIZE, seed=seed, num_workers=2, drop_last=True) as loader:
        c = loader.config
        for epoch in range(epochs):
            plan = EpochPlan(c.augment, seed, epoch, order, BATCH, True, block=block or 16, window=window or 256)
            model.train()
            for images, labels in loader.source.run(plan, 0, LoaderStats()):
                loss = F.cross_entropy(model(images), labels, label_smoothing=0.1)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                schedule.step()
                per_batch.append(len(set(labels.tolist())))
    hits = seen = 0
    model.eval()
    with FeedLoader(val, batch_size=BATCH, train=False, size=SIZE, num_workers=2) as loader, torch.no_grad():
        for images, labels in loader:
            hits += int((model(images).argmax(1) == labels).sum())
            seen += len(labels)
    return {"top1": hits / seen, "classes_per_batch": float(np.mean(per_batch))}


def summarize(setting: str, runs: list[dict]) -> dict:
    top1 = [r["top1"] for r in runs]
    row = {"setting": setting, "seeds": len(runs), "top1_mean": statistics.mean(top1),
           "top1_sd": statistics.stdev(top1) if len(top1) > 1 else None, "top1_min": min(top1), "top1_max": max(top1),
           "runs": runs}
    for key in ("val_loss", "classes_per_batch"):
        if key in runs[0]:
            row[f"{key}_mean"] = statistics.mean(r[key] for r in runs)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/order_quality.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, help="seeds per setting (default 5)")
    p.add_argument("--epochs", type=int, help="epochs per run (default 2, as the demo)")
    p.add_argument("--windows", default="2,8,16", help="small windows, in 16-record blocks (default 2,8,16)")
    p.add_argument("--quick", action="store_true", help=f"a tiny run for tests: {QUICK}")
    p.add_argument("--cache-dir", help="where the demo data is kept (default .cache/ in the repository)")
    output_arguments(p, "order_quality")
    args = p.parse_args(argv)
    check_output_flags(p, args)
    quick = QUICK if args.quick else {}
    seeds, epochs = args.seeds or quick.get("seeds", 5), args.epochs or quick.get("epochs", 2)
    windows = [int(w) for w in args.windows.split(",") if w.strip()]
    machine = machine_info()
    say(machine_line(machine))
    train, val = demo_data(args.cache_dir, quick.get("train", 600), quick.get("val", 120))
    rows = []
    work = cache_root(args.cache_dir) / "order-quality-runs"
    for order in ("random", "quasi-random"):
        runs = [trainer_run(train, val, order, seed, epochs, work / f"{order}-{seed}") for seed in range(seeds)]
        rows.append(summarize(f"feedline train --order {order}", runs))
        say(f"{rows[-1]['setting']}: top-1 {[round(r['top1'], 3) for r in runs]}")
    shuffled = shuffled_pack(args.cache_dir, Path(train).parent / "train")
    loops = [("", train, None, None)] + [("", train, BLOCK, w) for w in windows] + \
            [(", packed shuffled", shuffled, BLOCK, w) for w in windows[:2]]
    for packing, data, block, window in loops:
        runs = [loop_run(data, val, block, window, seed, epochs) for seed in range(seeds)]
        name = ("loop, random" if block is None else
                f"loop, quasi-random {block} x {window} ({block * window} records)") + packing
        rows.append(summarize(name, runs))
        say(f"{name}: top-1 {[round(r['top1'], 3) for r in runs]}")
    say()
    say(format_table(rows, [("setting", "setting"), ("seeds", "seeds"), ("top-1 mean", "top1_mean"),
                            ("sd", "top1_sd"), ("min", "top1_min"), ("max", "top1_max"),
                            ("val loss", "val_loss_mean"), ("classes/batch", "classes_per_batch_mean")]))
    path = write_results("order_quality", rows, {"seeds": seeds, "epochs": epochs, "windows": windows, "size": SIZE,
                                                 "batch": BATCH, "load_average": os.getloadavg()},
                         out=args.out, quick=args.quick, save=args.save, machine=machine)
    say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
