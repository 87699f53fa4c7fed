"""What a batch's targets cost beside its pixels: `TargetColumns.fill` for the label alone and
for label + labels + boxes (through the batch's crops and flips), against decoding and cropping
the same batch on one thread, side by side in one run.

    python bench/targets_fill.py [--images 256] [--batch 64] [--repeats 5] [--out PATH] [--save]

Data: ``--images`` photo-like JPEGs (`feedline sample`'s generator) packed to LMDB twice: with
their class folders alone, and with a JSON Lines labels file giving each image 1-3 classes of 80
and 0-20 boxes (7 on average, as COCO). Writes bench/results/local/targets_fill.json
(bench/results/targets_fill.json with --save). The issue's
bound (an epoch with labels + boxes within 5% of labels alone) is checked here per batch: the
extra fill time over the batch's decode time.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench.args import check_output_flags, output_arguments
from bench.common import Spread, fmt, format_table, printed, ratio, say, target, targets_table, timed, write_results


def labels_file(store, path: Path, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    with open(path, "w") as fh:
        for i in range(len(store)):
            h, w = store.size(i)
            boxes = []
            for _ in range(int(min(rng.poisson(7), 20))):
                x0, y0 = rng.uniform(0, w - 8), rng.uniform(0, h - 8)
                boxes.append([x0, y0, rng.uniform(x0 + 4, w), rng.uniform(y0 + 4, h), int(rng.integers(80))])
            classes = rng.choice(80, size=int(rng.integers(1, 4)), replace=False).tolist()
            fh.write(json.dumps({"path": store.path(i), "label": store.label(i), "labels": classes,
                                 "boxes": boxes}) + "\n")


def packed_pair(tmp: Path, images: int, classes: int) -> tuple[Path, Path]:
    """``images`` photo-like JPEGs in ``classes`` folders, packed to LMDB twice under ``tmp``:
    plain.lmdb with the class folders alone, boxes.lmdb with `labels_file`'s labels and boxes."""
    import feedline
    from converters import pack
    from feedline.sample import make_photo_folder
    make_photo_folder(str(tmp / "src"), n=images, classes=classes, seed=0)
    pack(str(tmp / "src"), str(tmp / "plain.lmdb"), progress=False)
    with feedline.open_dataset(str(tmp / "plain.lmdb")) as plain:
        labels_file(plain, tmp / "l.jsonl")
    pack(str(tmp / "src"), str(tmp / "boxes.lmdb"), labels_csv=str(tmp / "l.jsonl"), progress=False)
    return tmp / "plain.lmdb", tmp / "boxes.lmdb"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    output_arguments(p, "targets_fill")
    args = p.parse_args(argv)
    check_output_flags(p, args)
    import feedline
    from feedline.planning.augment import AugmentSpec, plan
    from feedline.decoders import get_decoder
    from feedline.decoders.base import Box

    with tempfile.TemporaryDirectory() as tmp:
        plain_path, boxes_path = packed_pair(Path(tmp), args.images, classes=10)
        spec = AugmentSpec(size=(224, 224), train=True)
        decoder = get_decoder("auto")
        rows = []
        with feedline.open_dataset(str(plain_path)) as plain, feedline.open_dataset(str(boxes_path)) as boxed:
            idx = np.arange(min(args.batch, len(plain)))
            crops, flips = plan(spec, 1, 0, idx, plain.sizes[idx, 0], plain.sizes[idx, 1])
            images = np.zeros((len(idx), 224, 224, 3), dtype=np.uint8)

            def decode():
                for k, i in enumerate(idx):
                    decoder.decode_into(plain.read(int(i)), Box(*crops[k]), bool(flips[k]), images[k])

            def filler(store):
                cols = store.target_columns
                out = {n: np.zeros(s, d) for n, (s, d) in cols.batch_layout(len(idx)).items()}
                return lambda: cols.fill(idx, out, crops=crops, flips=flips, size=spec.size)

            work = {"decode + crop (1 thread)": decode, "fill: label": filler(plain),
                    "fill: label + labels + boxes": filler(boxed)}
            for name, fn in work.items():
                fn()   # warm up
                spread = Spread.of([timed(fn) for _ in range(args.repeats)])
                rows.append({"work": name, "ms per batch": spread.median * 1e3, "spread": spread.to_dict()})
    decode_ms, label_ms, boxes_ms = (printed(r["ms per batch"]) for r in rows)
    extra = ratio(boxes_ms - label_ms, decode_ms)
    for r in rows:
        r["share of decode"] = ratio(printed(r["ms per batch"]), decode_ms)
    say(format_table(rows, [("work", "work"), ("ms/batch", "ms per batch"), ("/ decode", "share of decode")]))
    checks = [target("boxes' extra fill / a batch's decode", extra, 0.05, at_least=False, unit="")]
    say(targets_table(checks))
    params = {k: v for k, v in vars(args).items() if k != "save"}
    path = write_results("targets_fill", rows, params, args.out, targets=checks, save=args.save)
    say(f"wrote {path} (extra fill {fmt(extra)} of the decode)")


if __name__ == "__main__":
    main()
