"""How to store segmentation masks: bytes and decode time of PNG against feedline's
"deflate-rows" (row bands, each deflated alone: `feedline.dataset.mask_codec`), on masks cut from the
shipped photos at three typical sizes (VOC 500x375, ADE20K 683x512, Cityscapes 2048x1024).

    python bench/mask_codec.py [--repeats 15] [--quick] [--out PATH] [--save]

A mask here: a photo blurred, its colours quantized into regions (Lab, a few levels a channel)
and median-filtered: region edges that follow a real scene, as annotators' do. Each row
decodes a whole mask ("whole") and what one training sample reads: a RandomResizedCrop of
half the image's area, nearest-resized to 224 x 224 ("224 crop": PNG decodes everything; a
band decodes alone). PNG at OpenCV's strongest compression (level 9) and its default (1),
decoded by OpenCV, and by Pillow (which the pack reads files with). Writes
bench/results/local/mask_codec.json (bench/results/mask_codec.json with --save).
"""
from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench.args import check_output_flags, output_arguments
from bench.common import Spread, fmt, format_table, printed, ratio, say, timed, write_results

SIZES = {"VOC 500x375": (500, 375), "ADE20K 683x512": (683, 512), "Cityscapes 2048x1024": (2048, 1024)}
PHOTOS = Path(__file__).resolve().parents[1] / "feedline" / "sample" / "photos"


def region_mask(path: Path, size: tuple[int, int], levels: int = 4) -> np.ndarray:
    """Class indices (uint8) of the photo at ``path`` resized to ``size`` (W, H): blurred, each
    Lab channel cut into ``levels``, the cells numbered, speckle median-filtered away."""
    import cv2
    image = cv2.resize(cv2.imread(str(path), cv2.IMREAD_COLOR), size, interpolation=cv2.INTER_AREA)
    lab = cv2.cvtColor(cv2.GaussianBlur(image, (0, 0), 3), cv2.COLOR_BGR2LAB).astype(np.int32)
    cells = lab * levels // 256
    mask = (cells[..., 0] * levels * levels + cells[..., 1] * levels + cells[..., 2]).astype(np.uint8)
    for _ in range(2):
        mask = cv2.medianBlur(mask, 7)
    return mask


def codecs():
    """name -> (encode(mask) -> bytes, decode(bytes, rows, cols) -> the crop's classes)."""
    import cv2
    from PIL import Image

    from feedline.dataset.mask_codec import decode, encode

    def png(level):
        return lambda m: cv2.imencode(".png", m, [cv2.IMWRITE_PNG_COMPRESSION, level])[1].tobytes()

    def opencv(data, rows, cols):
        return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)[rows][:, cols]

    def pillow(data, rows, cols):
        return np.asarray(Image.open(io.BytesIO(data)))[rows][:, cols]

    def bands(data, rows, cols):
        first = int(rows[0])
        return decode(data, first, int(rows[-1]) + 1)[rows - first][:, cols]

    return {"PNG level 9, OpenCV": (png(9), opencv), "PNG level 1, OpenCV": (png(1), opencv),
            "PNG level 9, Pillow": (png(9), pillow), "deflate-rows (feedline)": (encode, bands)}


def picks(shape, crop: bool) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns one sample reads: a centred crop of half the area to 224 x 224, or everything."""
    from feedline.dataset.mask_sampling import resized_indices
    h, w = shape
    if not crop:
        return np.arange(h), np.arange(w)
    ch, cw = int(h * 0.7071), int(w * 0.7071)
    return resized_indices((h - ch) // 2, ch, 224), resized_indices((w - cw) // 2, cw, 224)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=15, help="timed decodes of each mask, rows interleaved")
    p.add_argument("--quick", action="store_true", help="a tiny run that finishes in seconds (for tests)")
    output_arguments(p, "mask_codec")
    args = p.parse_args(argv)
    check_output_flags(p, args)
    photos = sorted(f for f in PHOTOS.iterdir() if f.suffix in (".png", ".jpg"))[:2 if args.quick else None]
    sizes = dict(list(SIZES.items())[:1]) if args.quick else SIZES
    repeats = 2 if args.quick else args.repeats
    rows = []
    for size_name, size in sizes.items():
        masks = [region_mask(f, size) for f in photos]
        for name, (enc, dec) in codecs().items():
            stored = [enc(m) for m in masks]
            for crop in (False, True):
                reads = [picks(m.shape, crop) for m in masks]
                for m, data, (r, c) in zip(masks, stored, reads):   # lossless, and the same classes read
                    if not np.array_equal(dec(data, r, c), m[r][:, c]):
                        raise SystemExit(f"{name} does not give back the mask it stored")
                seconds = [timed(lambda: [dec(d, r, c) for d, (r, c) in zip(stored, reads)]) for _ in range(repeats)]
                rows.append({"masks": size_name, "codec": name, "read": "224 crop" if crop else "whole",
                             "bytes": float(np.mean([len(d) for d in stored])),
                             "ms": Spread.of(seconds).median * 1000 / len(masks), "spread": Spread.of(seconds).to_dict()})
    for r in rows:
        base = next(b for b in rows if (b["masks"], b["read"], b["codec"]) == (r["masks"], r["read"], "PNG level 9, OpenCV"))
        r["size / PNG 9"], r["time / PNG 9"] = ratio(printed(r["bytes"]), printed(base["bytes"])), \
            ratio(printed(r["ms"]), printed(base["ms"]))
    say(format_table(rows, [("masks", "masks"), ("codec", "codec"), ("read", "read"), ("bytes", "bytes"),
                            ("ms per mask", "ms"), ("size / PNG 9", "size / PNG 9"), ("time / PNG 9", "time / PNG 9")]))
    params = {"repeats": repeats, "photos": len(photos), "sizes": list(sizes), "quick": args.quick}
    path = write_results("mask_codec", rows, params, args.out, quick=args.quick, save=args.save)
    say(f"wrote {path} ({fmt(len(rows))} rows)")


if __name__ == "__main__":
    main()
