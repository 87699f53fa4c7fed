"""Image folders whose masks mark known regions, and the check that a delivered batch's masks
lie on its pixels.

Each image is four quadrants of flat colours, and its mask gives each quadrant its class:
top-left 1, top-right 2, bottom-left 3, bottom-right 4 (``QUADRANTS``), so wherever a crop,
flip, warp, erasing or paste puts a pixel, its class says which colour it must have.
"""
from __future__ import annotations

import json
import os

import numpy as np
from PIL import Image

from converters import PackOptions, pack

COLOURS = {1: (230, 30, 30), 2: (30, 220, 40), 3: (40, 60, 230), 4: (240, 240, 240)}
QUADRANTS = ((1, 2), (3, 4))   # [top or bottom][left or right]
IGNORE = 255


def quadrant_mask(h: int, w: int, scale: int = 1, split: tuple[int, int] | None = None) -> np.ndarray:
    """Classes 1..4 (times ``scale``: 1000 for a 16-bit mask) in the quadrants split at ``split`` (row, col)."""
    sy, sx = split or (h // 2, w // 2)
    mask = np.empty((h, w), np.uint16 if scale > 1 else np.uint8)
    for a, rows in enumerate((slice(0, sy), slice(sy, h))):
        for b, cols in enumerate((slice(0, sx), slice(sx, w))):
            mask[rows, cols] = QUADRANTS[a][b] * scale
    return mask


def quadrant_image(mask: np.ndarray, scale: int = 1) -> np.ndarray:
    image = np.zeros((*mask.shape, 3), np.uint8)
    for k, colour in COLOURS.items():
        image[mask == k * scale] = colour
    return image


SIZES = [(60, 80), (90, 70), (64, 64), (75, 100), (50, 50), (81, 63)]


def mask_folder(root, n: int = 6, scale: int = 1, jsonl: bool = False, label: bool = True,
                image_ext: str = ".png") -> tuple[str, str, dict[str, np.ndarray]]:
    """(image folder, labels file, {relative image path: its mask}): quadrant images and their
    masks, the split off-centre so a flip moves it; each image's label is its own id."""
    src = os.path.join(root, "src")
    os.makedirs(os.path.join(src, "img"), exist_ok=True)
    os.makedirs(os.path.join(src, "masks"), exist_ok=True)
    masks, rows = {}, []
    for k in range(n):
        h, w = SIZES[k % len(SIZES)]
        mask = quadrant_mask(h, w, scale, split=(h // 2 + k % 3, w // 3 + k % 5))
        rel, mask_rel = f"img/{k:02d}{image_ext}", f"masks/{k:02d}.png"
        Image.fromarray(quadrant_image(mask, scale)).save(os.path.join(src, rel))
        Image.fromarray(mask).save(os.path.join(src, mask_rel))
        masks[rel] = mask
        rows.append({"path": rel, **({"label": f"id{k:02d}"} if label else {}), "mask": mask_rel})
    if jsonl:
        path = os.path.join(root, "labels.jsonl")
        with open(path, "w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in rows)
    else:
        path = os.path.join(root, "labels.csv")
        with open(path, "w") as fh:
            fh.write(",".join(rows[0]) + "\n" + "".join(",".join(r.values()) + "\n" for r in rows))
    return src, path, masks


def packed(root, out: str = "masks.lmdb", **kw) -> tuple[str, dict[str, np.ndarray]]:
    """A packed quadrant set (``kw``: `mask_folder`'s), and its masks by path."""
    src, labels, masks = mask_folder(root, **kw)
    path = os.path.join(root, out)
    pack(src, path, PackOptions(labels_csv=labels))
    return path, masks


def check_on_pixels(images, masks, scale: int = 1, margin: int = 2, fill=(0, 0, 0)) -> int:
    """Assert that each class of ``masks`` (N x H x W) lies on its colour in ``images`` (uint8,
    N x 3 x H x W): of the four colours and ``fill`` (for ``IGNORE``), its own is the nearest,
    away from the regions' edges (``margin`` pixels, where resizing and JPEG blend colours);
    returns how many pixels were checked."""
    rgb = images.permute(0, 2, 3, 1).numpy().astype(np.int64)
    m = masks.numpy().astype(np.int64)
    classes = [*(k * scale for k in COLOURS), IGNORE]
    palette = np.array([*COLOURS.values(), fill], dtype=np.int64)
    nearest = np.asarray(classes)[np.argmin(((rgb[..., None, :] - palette) ** 2).sum(-1), axis=-1)]
    checked = 0
    for i in range(len(m)):
        interior = np.zeros_like(m[i], dtype=bool)
        interior[margin:-margin, margin:-margin] = True
        for dy in range(-margin, margin + 1):
            for dx in range(-margin, margin + 1):
                interior &= np.roll(np.roll(m[i], dy, 0), dx, 1) == m[i]
        wrong = interior & (nearest[i] != m[i])
        assert not wrong.any(), (f"sample {i}: {int(wrong.sum())} pixels whose class is not their colour's, "
                                 f"e.g. class {int(m[i][wrong][0])} on {rgb[i][wrong][0].tolist()}")
        unknown = set(np.unique(m[i]).tolist()) - set(classes)
        assert not unknown, f"sample {i}: classes {unknown} that no region has"
        checked += int(interior.sum())
    return checked
