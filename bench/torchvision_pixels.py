"""How far feedline's pixels are from torchvision's: the mean absolute difference, in grey
levels (0..255), between FeedLoader's evaluation batches (``train=False``: Resize(size /
crop_fraction) + CenterCrop(size)) and torchvision v2's ``Resize(256) + CenterCrop(224)``
(antialias=True, on tensors and on PIL images), and between the decoder's RandomResizedCrop
resize and torchvision's ``resized_crop`` with the same boxes.

    python bench/torchvision_pixels.py --torchvision-python /PATH/bin/python [--photos DIR] [--n N]

torchvision is no dependency of feedline: the references are computed by another Python that
has it (``--torchvision-python``), from the store's own bytes decoded whole by Pillow. Three
sets: the photos of ``--photos`` (default: the ones shipped with feedline), ``--n`` images
made by ``feedline sample`` (seed 0), and ``--large`` larger ones (seed 1), whose crops decoders
decode at a reduced DCT scale. Prints one row per photo and per set; writes
bench/results/local/torchvision_pixels.json (or ``--out``).
"""
from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # `python bench/torchvision_pixels.py`: the repository root on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import numpy as np  # noqa: E402

from bench.args import output_arguments  # noqa: E402
from bench.common import format_table, say, write_results  # noqa: E402

NAME = "torchvision_pixels"
SIZE, RESIZED = 224, 256
LARGE = [(1600, 1200), (2048, 1536), (1200, 1600)]

# Run by --torchvision-python: references for every image of an .npz written below.
REFERENCE = r"""
import sys, numpy as np, torch
from PIL import Image
from torchvision.transforms.v2 import functional as F
src = np.load(sys.argv[1])
out = {}
for k in range(int(src["count"])):
    full = src[f"full_{k}"]
    t = torch.from_numpy(full.copy()).permute(2, 0, 1).contiguous()
    out[f"tensor_{k}"] = F.center_crop(F.resize(t, [%(resized)d], antialias=True), [%(size)d]).permute(1, 2, 0).numpy()
    pil = F.center_crop(F.resize(Image.fromarray(full), [%(resized)d]), [%(size)d])
    out[f"pil_{k}"] = np.asarray(pil)
    top, left, h, w = (int(v) for v in src[f"box_{k}"])
    out[f"rrc_{k}"] = F.resized_crop(t, top, left, h, w, [%(size)d, %(size)d], antialias=True).permute(1, 2, 0).numpy()
np.savez(sys.argv[2], **out)
""" % {"size": SIZE, "resized": RESIZED}


def pack_folder(folder: str, out: str) -> str:
    from converters import PackOptions, pack
    pack(folder, out, PackOptions(progress=False))
    return out


def feedline_side(store_path: str, work: str) -> tuple[str, list[str]]:
    """An .npz of each record's whole decode (Pillow), FeedLoader's evaluation crop, a
    RandomResizedCrop box and the decoder's resize of it; and the records' paths."""
    import torch
    from PIL import Image

    from feedline import FeedLoader, open_dataset
    from feedline.planning.augment import AugmentSpec, plan
    from feedline.decoders.base import Box
    from feedline.decoders.selection import per_image_decoder
    arrays: dict[str, np.ndarray] = {}
    with open_dataset(store_path) as store:
        n = len(store)
        paths = [store.path(i) for i in range(n)]
        with FeedLoader(store, batch_size=n, train=False, size=SIZE, mean=None, num_workers=0,
                        device="cpu") as loader:
            images, _ = next(iter(loader))
        evals = images.permute(0, 2, 3, 1).contiguous().numpy()
        sizes = np.asarray(store.sizes)
        boxes, _ = plan(AugmentSpec(size=(SIZE, SIZE), train=True, scale=(0.25, 1.0)), 0, 0, np.arange(n),
                        sizes[:, 0], sizes[:, 1])
        decoder = per_image_decoder("auto")
        for k in range(n):
            data = bytes(store.read(k))
            arrays[f"full_{k}"] = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
            arrays[f"eval_{k}"] = evals[k]
            arrays[f"box_{k}"] = boxes[k].astype(np.int64)
            out = np.empty((SIZE, SIZE, 3), np.uint8)
            decoder.decode_into(data, Box(*boxes[k].tolist()), False, out)
            arrays[f"rrcfl_{k}"] = out
    del torch
    path = os.path.join(work, os.path.basename(store_path) + ".npz")
    np.savez(path, count=n, **arrays)
    return path, paths


def compare(python: str, mine: str, work: str, paths: list[str], label: str) -> list[dict]:
    script = os.path.join(work, "reference.py")
    Path(script).write_text(REFERENCE)
    ref_path = os.path.join(work, f"{label}_reference.npz")
    subprocess.run([python, script, mine, ref_path], check=True)
    ours, ref = np.load(mine), np.load(ref_path)
    rows = []
    for k, path in enumerate(paths):
        h, w = ours[f"full_{k}"].shape[:2]

        def diff(a, b):
            return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())
        rows.append({"set": label, "image": path, "size": f"{w}x{h}",
                     "eval_vs_tensor": diff(ours[f"eval_{k}"], ref[f"tensor_{k}"]),
                     "eval_vs_pil": diff(ours[f"eval_{k}"], ref[f"pil_{k}"]),
                     "rrc_vs_tensor": diff(ours[f"rrcfl_{k}"], ref[f"rrc_{k}"])})
    return rows


def summary(rows: list[dict], label: str) -> dict:
    mine = [r for r in rows if r["set"] == label]
    out = {"set": label, "image": f"{len(mine)} images", "size": ""}
    for key in ("eval_vs_tensor", "eval_vs_pil", "rrc_vs_tensor"):
        values = [r[key] for r in mine]
        out[key] = float(np.mean(values))
        out[key + "_max"] = float(np.max(values))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--torchvision-python", required=True, metavar="PYTHON",
                   help="a Python with torch and torchvision (e.g. a venv of its own)")
    p.add_argument("--photos", metavar="DIR", help="a folder of photos (default: feedline's shipped ones)")
    p.add_argument("--n", type=int, default=40, help="images of the `feedline sample` set (default 40)")
    p.add_argument("--large", type=int, default=12, help="images of a `feedline sample` set at 1600x1200 to "
                                                        "2048x1536, where decoders scale in the DCT (default 12)")
    output_arguments(p, NAME)
    args = p.parse_args(argv)
    from feedline.sample import make_photo_folder, photo_paths
    work = tempfile.mkdtemp(prefix="feedline-tvpixels-")
    try:
        photos = os.path.join(work, "photos", "all")
        os.makedirs(photos)
        sources = [os.path.join(args.photos, f) for f in sorted(os.listdir(args.photos))] if args.photos \
            else photo_paths()
        for f in sources:
            if f.lower().endswith((".png", ".jpg", ".jpeg")):
                shutil.copy(f, photos)
        make_photo_folder(os.path.join(work, "sample"), n=args.n, classes=4, seed=0)
        make_photo_folder(os.path.join(work, "large"), n=args.large, classes=2, seed=1, sizes=LARGE)
        rows = []
        for label in ("photos", "sample", "large"):
            folder = os.path.dirname(photos) if label == "photos" else os.path.join(work, label)
            store = pack_folder(folder, os.path.join(work, f"{label}.lmdb"))
            mine, paths = feedline_side(store, work)
            rows += compare(args.torchvision_python, mine, work, paths, label)
        totals = [summary(rows, label) for label in ("photos", "sample", "large")]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    columns = [("set", "set"), ("image", "image"), ("WxH", "size"), ("eval vs tensor", "eval_vs_tensor"),
               ("eval vs PIL", "eval_vs_pil"), ("RRC vs tensor", "rrc_vs_tensor"),
               ("max eval", "eval_vs_tensor_max"), ("max RRC", "rrc_vs_tensor_max")]
    say(format_table([r for r in rows if r["set"] == "photos"] + totals, columns))
    say("(mean absolute difference in grey levels; a set's row: the mean over its images, and the largest)")
    write_results(NAME, rows + totals, {"size": SIZE, "resized": RESIZED, "n": args.n, "large": args.large},
                  out=args.out,
                  save=args.save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
