"""Realistic sample image folders from the public-domain photos shipped with feedline.

Each image is a random crop of a real photo, rescaled to an ImageNet-like size
(mostly about 500x375), jittered in brightness, given sensor-like noise and saved as
a JPEG of quality 85-95: the entropy, size (~80 KiB) and decode cost of real training
photos, which random-noise and flat images do not have. Deterministic for a seed.
Adapted from shared/tools/make_photos.py; the photos' licences are in photos/LICENSES.md.
"""
from __future__ import annotations

import os
import random
from importlib import resources
from typing import Callable

import cv2
import numpy as np

# (width, height) of output images, weighted towards ImageNet's common shapes.
SIZES = [(500, 375)] * 4 + [(500, 333)] * 2 + [(375, 500)] * 2 + [
    (500, 400), (640, 480), (333, 500), (800, 600), (300, 225), (1024, 768)]


def photo_paths() -> list[str]:
    folder = resources.files(__package__) / "photos"
    return sorted(str(p) for p in folder.iterdir() if p.name.lower().endswith((".png", ".jpg", ".jpeg")))


def _load_photos() -> list[np.ndarray]:
    return [cv2.imread(p, cv2.IMREAD_COLOR) for p in photo_paths()]


def make_image(rng: random.Random, src: np.ndarray, gray_fraction: float = 0.05,
               sizes=SIZES) -> bytes:
    """One realistic JPEG (encoded bytes) cut from the BGR photo ``src``."""
    h, w = src.shape[:2]
    f = rng.uniform(0.5, 1.0)
    ch, cw = int(h * f), int(w * f)
    y, x = rng.randrange(h - ch + 1), rng.randrange(w - cw + 1)
    tw, th = sizes[rng.randrange(len(sizes))]
    img = cv2.resize(src[y:y + ch, x:x + cw], (tw, th), interpolation=cv2.INTER_AREA)
    if rng.random() < 0.5:
        img = img[:, ::-1]
    noise_rng = np.random.default_rng(rng.randrange(1 << 30))
    noise = noise_rng.normal(0, rng.uniform(4, 12), img.shape).astype(np.float32)
    img = img.astype(np.float32) * rng.uniform(0.8, 1.2) + rng.uniform(-20, 20) + noise
    img = np.clip(img, 0, 255).astype(np.uint8)
    if rng.random() < gray_fraction:
        img = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, rng.randint(85, 95)])
    if not ok:
        raise RuntimeError("OpenCV could not encode a sample JPEG")
    return buf.tobytes()


def make_photo_folder(out: str, n: int = 200, classes: int = 10, seed: int = 0,
                      gray_fraction: float = 0.05, sizes=SIZES, photo_per_class: bool = False,
                      on_progress: Callable[[int, int], None] | None = None) -> dict:
    """Write ``n`` JPEGs into ``out/class_XXX/img_XXXXXXX.jpg``; returns a summary.

    By default every class draws from every photo (labels carry no signal: for speed
    measurements). ``photo_per_class`` cuts class k from photo k only, so a model can
    learn the labels, as in the demo. ``on_progress(done, n)`` follows each image."""
    if n < 1 or classes < 1:
        raise ValueError(f"a sample needs at least one image and one class, got n={n}, classes={classes}")
    srcs = _load_photos()
    rng = random.Random(seed)
    total = 0
    for i in range(n):
        label = i % classes
        folder = os.path.join(out, f"class_{label:03d}")
        os.makedirs(folder, exist_ok=True)
        src = srcs[label % len(srcs)] if photo_per_class else srcs[rng.randrange(len(srcs))]
        data = make_image(rng, src, gray_fraction, sizes)
        with open(os.path.join(folder, f"img_{i:07d}.jpg"), "wb") as fh:
            fh.write(data)
        total += len(data)
        if on_progress is not None:
            on_progress(i + 1, n)
    return {"images": n, "classes": classes, "bytes": total, "mean_kib": total / max(n, 1) / 1024}
