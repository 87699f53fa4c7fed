"""What targets cost in a real epoch: FeedLoader over the same images packed three times, with
their label alone, with label + labels + boxes (COCO-like: 0-20 boxes, 7 on average, 1-3 of 80
classes) and with label + a segmentation mask (regions of each photo: bench/mask_codec.py's),
delivered as int64 and as uint8; epochs interleaved in one run, and the ratio of each epoch
time to the label's. A mask is made per sample by the workers: decoded (its crop's rows),
nearest-resized and flipped, and written beside the pixels.

    python bench/targets.py [--images 512] [--batch 64] [--size 224] [--threads T] [--repeats 9]
                            [--quick] [--out PATH] [--save]

The issue's bound: an epoch with labels + boxes takes at most 1.05x the time of labels alone.
Writes bench/results/local/targets.json (bench/results/targets.json with --save).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench.args import check_output_flags, output_arguments
from bench.common import Spread, fmt, format_table, printed, ratio, say, target, targets_table, timed, write_results
from bench.targets_fill import packed_pair

QUICK = {"images": 16, "batch": 8, "size": 64, "repeats": 1}


def packed_masks(tmp: Path, plain: Path) -> Path:
    """The images of ``plain`` packed again with their labels and a region mask each."""
    import json

    from PIL import Image

    import feedline
    from bench.mask_codec import region_mask
    from converters import pack
    (tmp / "src" / "masks").mkdir()   # beside the images: a labels file's mask column names files inside
    with feedline.open_dataset(str(plain)) as store, open(tmp / "masks.jsonl", "w") as fh:
        for i in range(len(store)):
            h, w = store.size(i)
            Image.fromarray(region_mask(tmp / "src" / store.path(i), (w, h))).save(tmp / "src" / "masks" / f"{i}.png")
            fh.write(json.dumps({"path": store.path(i), "label": store.label(i), "mask": f"masks/{i}.png"}) + "\n")
    pack(str(tmp / "src"), str(tmp / "masks.lmdb"), labels_csv=str(tmp / "masks.jsonl"), progress=False)
    return tmp / "masks.lmdb"


def epoch(loader) -> int:
    """One full epoch; the images seen (the batches are dropped at once, as a training step would)."""
    seen = 0
    for images, _ in loader:
        seen += len(images)
    return seen


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--threads", type=int, default=None, help="decode threads (default: usable cores)")
    p.add_argument("--repeats", type=int, default=9, help="timed epochs of each, interleaved")
    p.add_argument("--quick", action="store_true", help="a tiny run that finishes in seconds (for tests)")
    output_arguments(p, "targets")
    args = p.parse_args(argv)
    check_output_flags(p, args)
    if args.quick:
        for k, v in QUICK.items():
            setattr(args, k, v)
    import torch

    import feedline
    with tempfile.TemporaryDirectory() as tmp:
        plain, boxes = packed_pair(Path(tmp), args.images, classes=4)
        masks = packed_masks(Path(tmp), plain)
        kw = dict(batch_size=args.batch, size=args.size, shuffle=True, train=True, device="cpu",
                  num_workers=args.threads or "auto", seed=0)
        paths = {"label": (plain, {}), "label + labels + boxes": (boxes, {}), "label + mask (int64)": (masks, {}),
                 "label + mask (uint8)": (masks, {"output": feedline.OutputSpec(mask_dtype=torch.uint8)})}
        loaders = {name: feedline.FeedLoader(str(path), **kw, **more) for name, (path, more) in paths.items()}
        try:
            for loader in loaders.values():
                epoch(loader)   # warm up: page cache, threads, ring
            times = {name: [] for name in loaders}
            for _ in range(args.repeats):   # interleaved: drift hits both alike
                for name, loader in loaders.items():
                    times[name].append(timed(lambda loader=loader: epoch(loader)))
        finally:
            for loader in loaders.values():
                loader.close()
    rows = []
    for name, seconds in times.items():
        spread = Spread.of(seconds)
        rows.append({"targets": name, "epoch s": spread.median, "images/s": args.images / spread.median,
                     "spread": spread.to_dict()})
    slower = ratio(printed(rows[1]["epoch s"]), printed(rows[0]["epoch s"]))
    for r in rows:
        r["vs label"] = ratio(printed(r["epoch s"]), printed(rows[0]["epoch s"]))
    say(format_table(rows, [("targets", "targets"), ("epoch s", "epoch s"), ("images/s", "images/s"),
                            ("/ label", "vs label")]))
    checks = [target("epoch with labels + boxes / label alone", slower, 1.05, at_least=False)]
    say(targets_table(checks, args.quick))
    params = {k: v for k, v in vars(args).items() if k not in ("out", "save")}
    path = write_results("targets", rows, params, args.out, targets=checks, quick=args.quick, save=args.save)
    say(f"wrote {path} (labels + boxes take {fmt(slower)}x the epoch of the label alone)")


if __name__ == "__main__":
    main()
