"""What torchvision's antialiased resize costs a decode thread: per image, on one thread, the
decode (simplejpeg, full size), feedline's resize (`feedline.decoders.resample`: torch's
uint8 kernel, or Pillow's for regions off its grid) and OpenCV's plain bilinear resize
(INTER_LINEAR, INTER_AREA from a 2x shrink: what feedline used before, which torchvision's
pixels differ from), for evaluation crops and RandomResizedCrop crops of photo-like JPEGs.

    python bench/resize.py [--n N] [--repeats R] [--size S] [--quick]

Indicative only on a shared machine: the rows run interleaved, and the ratios are the
quotient of the medians printed. Writes bench/results/local/resize.json (or ``--out``).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/resize.py`: the repository root on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import numpy as np  # noqa: E402

from bench.args import check_output_flags, output_arguments  # noqa: E402
from bench.common import format_table, ratio, say, write_results  # noqa: E402

NAME = "resize"


def opencv_bilinear(crop: np.ndarray, out: np.ndarray) -> None:
    """The resize feedline used before: INTER_LINEAR, INTER_AREA from a 2x shrink."""
    import cv2
    h, w = out.shape[:2]
    far = crop.shape[0] >= 2 * h or crop.shape[1] >= 2 * w
    if far and (crop.shape[0] < h or crop.shape[1] < w):
        crop = cv2.resize(crop, (min(w, crop.shape[1]), min(h, crop.shape[0])), interpolation=cv2.INTER_AREA)
        far = False
    cv2.resize(crop, (w, h), dst=out, interpolation=cv2.INTER_AREA if far else cv2.INTER_LINEAR)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=40, help="images (default 40)")
    p.add_argument("--repeats", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--size", type=int, default=224, help="output side (default 224)")
    p.add_argument("--quick", action="store_true", help="a tiny run that finishes in seconds")
    output_arguments(p, NAME)
    args = p.parse_args(argv)
    check_output_flags(p, args)
    if args.quick:
        args.n, args.repeats = min(args.n, 4), 1
    import simplejpeg
    import torch

    from feedline.planning.augment import AugmentSpec, plan
    from feedline.decoders.base import Box, resize_scaled_into
    from feedline.sample import make_photo_folder
    torch.set_num_threads(1)   # as in a worker process
    with tempfile.TemporaryDirectory() as work:
        make_photo_folder(work, n=args.n, classes=1, seed=0)
        datas = [f.read_bytes() for f in sorted(Path(work).rglob("*.jpg"))]
    images = [simplejpeg.decode_jpeg(d) for d in datas]
    sizes = np.array([im.shape[:2] for im in images])
    out = np.empty((args.size, args.size, 3), np.uint8)
    crops = {}
    for kind, train in (("eval", False), ("rrc", True)):
        boxes, _ = plan(AugmentSpec(size=args.size, train=train), 0, 0, np.arange(len(images)), sizes[:, 0], sizes[:, 1])
        crops[kind] = [Box(*b.tolist()) for b in boxes]

    def cut(image, box):
        return image[round(box.top):round(box.top + box.height), round(box.left):round(box.left + box.width)]

    rows = {("decode", "-"): lambda k, kind: simplejpeg.decode_jpeg(datas[k])}
    for kind in crops:
        rows[("feedline (torchvision's)", kind)] = \
            lambda k, kind=kind: resize_scaled_into(images[k], crops[kind][k], (1, 1), out, False)
        rows[("OpenCV bilinear (before)", kind)] = \
            lambda k, kind=kind: opencv_bilinear(cut(images[k], crops[kind][k]), out)
    times = {row: [] for row in rows}
    for _ in range(args.repeats):
        for row, fn in rows.items():
            started = time.perf_counter()
            for k in range(len(images)):
                fn(k, row[1]) if row[1] != "-" else fn(k, None)
            times[row].append((time.perf_counter() - started) / len(images) * 1e3)
    decode = float(np.median(times[("decode", "-")]))
    results = [{"what": what, "crop": kind, "ms_per_image": float(np.median(t)),
                "x_decode": ratio(float(np.median(t)), decode)} for (what, kind), t in times.items()]
    say(format_table(results, [("what", "what"), ("crop", "crop"), ("ms/image", "ms_per_image"),
                               ("x decode", "x_decode")]))
    say(f"(median of {args.repeats} rounds over {len(images)} images, one thread; torch threads 1; "
        f"{os.cpu_count()} cores, shared)")
    write_results(NAME, results, {"n": len(images), "repeats": args.repeats, "size": args.size}, out=args.out,
                  quick=args.quick, save=args.save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
