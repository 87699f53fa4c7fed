"""The GPU benchmarks' data: N realistic photo-like JPEGs (feedline.sample), made on all
cores, each linked --repeats times into one folder, and the LMDB file `converters.pack`
makes of that folder. Made once per folder.

    python bench/gpu/photos.py --n 2048 --repeats 8 --out /var/tmp/feedline-gpu/data

Prints one JSON line: {"folder", "packed", "photos", "images", "seconds"}. The repeats make
an epoch long (16,384 records: 64 batches of 256) without the cost of making more photos,
so a measurement sees few epoch starts, as on ImageNet. The folder is in ImageFolder layout
(class_XXX/...), so torchvision's DataLoader baseline reads the very bytes FeedLoader reads
from the packed file.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

if __package__ in (None, ""):  # `python bench/gpu/photos.py`: the repository root on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[2])

CLASSES = 10


def _make_chunk(args: tuple[str, int, int, int]) -> int:
    """Chunk ``k`` of ``n`` images into ``folder/chunk-k`` with seed ``seed + k``."""
    folder, k, n, seed = args
    from feedline.sample import make_photo_folder
    make_photo_folder(os.path.join(folder, f"chunk-{k:03d}"), n=n, classes=CLASSES, seed=seed + k)
    return n


def make_photos(out: Path, n: int, workers: int, seed: int = 0) -> Path:
    """``out`` with n photos in class folders, written under a temporary name first."""
    if out.is_dir():
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    chunks = max(1, min(workers * 4, n // 50))
    sizes = [n // chunks + (k < n % chunks) for k in range(chunks)]
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(_make_chunk, [(str(tmp), k, size, seed) for k, size in enumerate(sizes)]))
    for chunk in sorted(tmp.glob("chunk-*")):  # chunk-k/class_c/img_i.jpg -> class_c/k-img_i.jpg
        for image in chunk.glob("class_*/*.jpg"):
            target = tmp / image.parent.name
            target.mkdir(exist_ok=True)
            image.rename(target / f"{chunk.name}-{image.name}")
        shutil.rmtree(chunk)
    os.rename(tmp, out)
    return out


def repeat_links(photos: Path, out: Path, repeats: int) -> Path:
    """``out``: every image of ``photos`` hard-linked ``repeats`` times (r0-NAME, r1-NAME, ...)."""
    if out.is_dir():
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for image in sorted(photos.glob("class_*/*.jpg")):
        (tmp / image.parent.name).mkdir(parents=True, exist_ok=True)
        for k in range(repeats):
            os.link(image, tmp / image.parent.name / f"r{k}-{image.name}")
    os.rename(tmp, out)
    return out


def make_packed(folder: Path, packed: Path) -> Path:
    if not packed.exists():
        from converters import pack
        pack(str(folder), str(packed), overwrite=True, progress=False)
    return packed


def prepare(out: Path, n: int, workers: int | None = None, repeats: int = 1) -> dict:
    t0 = time.perf_counter()
    workers = workers or os.cpu_count() or 1
    folder = make_photos(out / f"photos-{n}", n, workers)
    if repeats > 1:
        folder = repeat_links(folder, out / f"photos-{n}x{repeats}", repeats)
    packed = make_packed(folder, out / f"{folder.name}.lmdb")
    return {"folder": str(folder), "packed": str(packed), "photos": n, "images": n * repeats,
            "seconds": round(time.perf_counter() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=10_000, help="images (default 10000)")
    p.add_argument("--out", type=Path, required=True, help="folder for the photos and the packed file")
    p.add_argument("--per-core", type=int, help="photos per core instead of --n (the GPU check: 128)")
    p.add_argument("--repeats", type=int, default=1, help="times each photo is in the packed file (default 1)")
    p.add_argument("--workers", type=int, help="processes (default: all cores)")
    a = p.parse_args(argv)
    for name in ("n", "per_core", "repeats"):
        if getattr(a, name) is not None and getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    n = a.per_core * (os.cpu_count() or 1) if a.per_core else a.n
    print(json.dumps(prepare(a.out, n, a.workers, a.repeats)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
