"""Affine ops of the auto-augment family (shear, translate, rotate), nearest neighbour, with a
fill colour outside the image, as torchvision applies them.

Each sample's op is a 2 x 3 inverse matrix in PIL's convention: the centre of output pixel
(x, y) is the point (x + 0.5, y + 0.5), the matrix maps it to a point of the input, and the
input pixel under that point is taken (torchvision's PIL path calls PIL's Image.transform
with exactly these matrices). OpenCV's warpAffine and torch's grid_sample get the same
matrix rewritten in their own pixel conventions.
"""
from __future__ import annotations

import cv2
import numpy as np
import torch
import torch.nn.functional as F


def shear_x(m) -> np.ndarray:
    """torchvision's ShearX(m): affine(shear=(degrees(atan(m)), 0), center=(0, 0))."""
    m = np.asarray(m, dtype=np.float64)
    one, zero = np.ones_like(m), np.zeros_like(m)
    return np.stack([np.stack([one, m, zero], -1), np.stack([zero, one, zero], -1)], -2)


def shear_y(m) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    one, zero = np.ones_like(m), np.zeros_like(m)
    return np.stack([np.stack([one, zero, zero], -1), np.stack([m, one, zero], -1)], -2)


def translate(tx, ty) -> np.ndarray:
    """Move the image by whole pixels (tx right, ty down); torchvision passes int(magnitude)."""
    tx = np.trunc(np.asarray(tx, dtype=np.float64))
    ty = np.trunc(np.asarray(ty, dtype=np.float64))
    one, zero = np.ones_like(tx), np.zeros_like(tx)
    return np.stack([np.stack([one, zero, -tx], -1), np.stack([zero, one, -ty], -1)], -2)


def rotate(degrees, height: int, width: int) -> np.ndarray:
    """PIL's Image.rotate(degrees) (counter-clockwise) about the image centre, not expanded."""
    a = -np.radians(np.mod(np.asarray(degrees, dtype=np.float64), 360.0))
    cos, sin = np.round(np.cos(a), 15), np.round(np.sin(a), 15)
    cx, cy = width / 2.0, height / 2.0
    tx = cos * -cx + sin * -cy + cx
    ty = -sin * -cx + cos * -cy + cy
    return np.stack([np.stack([cos, sin, tx], -1), np.stack([-sin, cos, ty], -1)], -2)


def _fill3(fill) -> tuple[float, float, float]:
    f = np.broadcast_to(np.asarray(fill, dtype=np.float64), (3,))
    return float(f[0]), float(f[1]), float(f[2])


def warp_np(img: np.ndarray, matrix: np.ndarray, fill=0) -> np.ndarray:
    """One uint8 H x W x 3 image through one inverse matrix (OpenCV puts pixel centres on whole
    numbers and rounds to the nearest, which is PIL's floor of the half-shifted point)."""
    m = np.array(matrix, dtype=np.float64)
    m[:, 2] += m[:, :2].sum(axis=1) * 0.5 - 0.5
    h, w = img.shape[:2]
    return cv2.warpAffine(img, m, (w, h), flags=cv2.INTER_NEAREST | cv2.WARP_INVERSE_MAP,
                          borderMode=cv2.BORDER_CONSTANT, borderValue=_fill3(fill))


def warp_t(x: torch.Tensor, matrices: np.ndarray, fill=0) -> torch.Tensor:
    """A float N x 3 x H x W batch, one inverse matrix per sample, in normalized coordinates
    (grid_sample with align_corners=False: pixel edges at -1 and 1)."""
    n, _, h, w = x.shape
    m = np.asarray(matrices, dtype=np.float64).reshape(n, 2, 3)
    scale = np.array([2.0 / w, 2.0 / h])
    a = m[:, :, :2] * scale[None, :, None] / scale[None, None, :]
    b = a.sum(axis=2) + m[:, :, 2] * scale - 1.0
    theta = torch.as_tensor(np.concatenate([a, b[:, :, None]], axis=2), dtype=torch.float32,
                            device=x.device)
    grid = F.affine_grid(theta, [n, 3, h, w], align_corners=False)
    out = F.grid_sample(x, grid.to(x.dtype), mode="nearest", padding_mode="zeros",
                        align_corners=False)
    colour = _fill3(fill)
    if any(colour):
        inside = F.grid_sample(torch.ones_like(x[:, :1]), grid.to(x.dtype), mode="nearest",
                               padding_mode="zeros", align_corners=False)
        out = out + (1 - inside) * torch.tensor(colour, dtype=x.dtype, device=x.device).reshape(1, 3, 1, 1)
    return out
