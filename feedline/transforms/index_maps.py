"""The auto-augment family's nearest-neighbour geometry on one uint8 image through cached
index maps: the same source pixels as the tensor path (geometry.py), at the cost of a copy.

Which source pixel torchvision's tensor path picks for each output pixel (its float32 affine
grid, grid_sample nearest) depends only on the inverse matrix and the image size, not on the
pixels. So the picks are computed once per (matrix, size) by that same torch code, run on an
image of pixel coordinates, and kept as an OpenCV map; cv2.remap then copies the pixels and
fills outside. Whole-pixel translations need no map: every pick is the pixel a whole number
of pixels away (the float32 grid is within far less than half a pixel of it), a slice copy.

The maps are kept per process in a cache bounded in bytes (``MAX_BYTES``), least recently
used first out: RandAugment needs a few per image size, TrivialAugmentWide's 31 bins and two
signs of three ops about 190.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Callable

import cv2
import numpy as np
import torch
import torch.nn.functional as F

from .geometry import affine_grid, warp_np

MAX_BYTES = 64 << 20
_MAX_SIDE = 1 << 15   # OpenCV's int16 maps


class MapCache:
    """Maps by key, least recently used evicted past ``max_bytes``; safe across threads (a map
    wanted by two threads at once may be built twice, never stored torn)."""

    def __init__(self, max_bytes: int = MAX_BYTES):
        self.max_bytes = max_bytes
        self._maps: OrderedDict = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key, build: Callable[[], np.ndarray]) -> np.ndarray:
        with self._lock:
            found = self._maps.get(key)
            if found is not None:
                self._maps.move_to_end(key)
                return found
        made = build()
        made.flags.writeable = False
        with self._lock:
            if key not in self._maps:
                self._maps[key] = made
                self._bytes += made.nbytes
            while self._bytes > self.max_bytes and len(self._maps) > 1:
                _, old = self._maps.popitem(last=False)
                self._bytes -= old.nbytes
        return made

    def renew_lock(self) -> None:
        """A fresh lock, for a forked child: a thread of the parent may have held the old one."""
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._maps)

    @property
    def nbytes(self) -> int:
        return self._bytes


_CACHE = MapCache()
os.register_at_fork(after_in_child=_CACHE.renew_lock)   # the maps stay: shared pages, still valid


def source_map(matrix, height: int, width: int, dtype=torch.int16) -> np.ndarray:
    """int16 H x W x 2: the (x, y) of the pixel each output pixel takes, (-1, -1) outside, as
    grid_sample (nearest, zeros outside) picks it on torchvision's grid for ``matrix``."""
    ys, xs = torch.meshgrid(torch.arange(1, height + 1, dtype=torch.float32),
                            torch.arange(1, width + 1, dtype=torch.float32), indexing="ij")
    coords = torch.stack((xs, ys))[None]      # 1-based, so that 0 (outside) becomes -1
    picked = F.grid_sample(coords, affine_grid(matrix, height, width, "cpu"), mode="nearest",
                           padding_mode="zeros", align_corners=False)
    return (picked[0] - 1).permute(1, 2, 0).to(dtype).contiguous().numpy()


def fill_u8(fill) -> tuple[int, int, int]:
    """The fill colour as the tensor path's uint8 result has it (rounded half to even)."""
    f = np.rint(np.broadcast_to(np.asarray(fill, dtype=np.float64), (3,)))
    return int(f[0]), int(f[1]), int(f[2])


def warp_nearest(img: np.ndarray, matrix, fill=0) -> np.ndarray:
    """``img`` through the inverse affine ``matrix`` (geometry.py's), nearest, ``fill`` outside."""
    h, w = img.shape[:2]
    if max(h, w) >= _MAX_SIDE:
        return warp_np(img, matrix, fill)
    key = (tuple(float(v) for v in matrix), h, w)
    picks = _CACHE.get(key, lambda: source_map(matrix, h, w))
    return cv2.remap(np.ascontiguousarray(img), picks, None, cv2.INTER_NEAREST,
                     borderMode=cv2.BORDER_CONSTANT, borderValue=fill_u8(fill))


def warp_mask(mask: np.ndarray, matrix, fill: int) -> np.ndarray:
    """A mask (H x W, any integer dtype) through ``matrix`` on the image's picks (``warp_nearest``'s
    cached map): each output pixel the class of the source pixel the image's takes, ``fill``
    outside the image."""
    h, w = mask.shape
    picks = source_map(matrix, h, w, torch.int32) if max(h, w) >= _MAX_SIDE else \
        _CACHE.get((tuple(float(v) for v in matrix), h, w), lambda: source_map(matrix, h, w))
    xs, ys = picks[..., 0], picks[..., 1]
    out = mask[np.maximum(ys, 0), np.maximum(xs, 0)]
    out[xs < 0] = fill
    return out


def shift_mask(mask: np.ndarray, tx: int, ty: int, fill: int) -> np.ndarray:
    """A mask moved as ``shift`` moves its image, ``fill`` where nothing lands."""
    h, w = mask.shape
    out = np.full_like(mask, fill)
    if abs(tx) < w and abs(ty) < h:
        out[max(ty, 0):h + min(ty, 0), max(tx, 0):w + min(tx, 0)] = \
            mask[max(-ty, 0):h - max(ty, 0), max(-tx, 0):w - max(tx, 0)]
    return out


def shift(img: np.ndarray, tx: int, ty: int, fill=0) -> np.ndarray:
    """``img`` moved ``tx`` pixels right and ``ty`` down, ``fill`` where nothing lands."""
    h, w = img.shape[:2]
    if abs(tx) >= w or abs(ty) >= h:
        out = np.empty_like(img)
        out[:, :] = fill_u8(fill)
        return out
    kept = np.ascontiguousarray(img[max(-ty, 0):h - max(ty, 0), max(-tx, 0):w - max(tx, 0)])
    return cv2.copyMakeBorder(kept, max(ty, 0), max(-ty, 0), max(tx, 0), max(-tx, 0),
                              cv2.BORDER_CONSTANT, value=fill_u8(fill))
