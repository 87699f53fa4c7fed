"""timm's geometric ops (rotate, shear, translate) as PIL's Image.transform / Image.rotate
compute them for timm: output pixel (x, y) samples the input at the matrix applied to its
centre (x + 0.5, y + 0.5); outside the input, timm's fill; inside, interpolated (bilinear or
bicubic) from edge-clamped pixels, by torch's grid_sample.

The sampling points are computed in float64 as a x + b y + c, then as grid units in float32;
a coordinate that depends on x alone or y alone (every op but rotate has one) is computed on
one row or column and broadcast, the same numbers for less work. A batch (any device) and one
image on a decode thread go through the same grid and grid_sample, so they give the same
pixels; one image skips the batch's tensor-wide fill, filling only the pixels outside.
"""
from __future__ import annotations

import math

import cv2
import numpy as np
import torch
import torch.nn.functional as F


def pil_matrix(op: str, v: float, height: int, width: int) -> tuple[float, ...]:
    """The 6 coefficients timm hands PIL's Image.transform (or Image.rotate builds)."""
    if op == "ShearX":
        return (1, v, 0, 0, 1, 0)
    if op == "ShearY":
        return (1, 0, 0, v, 1, 0)
    if op == "TranslateXRel":
        return (1, 0, v * width, 0, 1, 0)
    if op == "TranslateYRel":
        return (1, 0, 0, 0, 1, v * height)
    angle = -math.radians(v)  # Image.rotate(v): counter-clockwise about the centre
    a, b = round(math.cos(angle), 15), round(math.sin(angle), 15)
    cx, cy = width / 2.0, height / 2.0
    return (a, b, a * -cx + b * -cy + cx, -b, a, -b * -cx + a * -cy + cy)


def _axis(a: float, b: float, c: float, side: int, height: int, width: int):
    """One coordinate of the sampling points, (a x + b y) + c in float64 at the pixel centres,
    as float32 grid units 2 v / side - 1 and whether it falls inside 0 <= v < side; shaped
    (1, w), (h, 1) or (h, w) as it depends on x, y or both (a zero term adds nothing)."""
    xs, ys = np.arange(width) + 0.5, np.arange(height) + 0.5
    if b == 0:
        v = (a * xs + c)[None, :]
    elif a == 0:
        v = (b * ys + c)[:, None]
    else:
        v = a * xs[None, :] + b * ys[:, None]
        v += c
    inside = (v >= 0) & (v < side)
    v *= 2
    v /= side
    v -= 1
    return v.astype(np.float32), inside


def sampling_grid(matrix, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(float32 H x W x 2 grid for grid_sample, bool H x W: the point is inside the input)."""
    m = [float(v) for v in matrix]
    gx, in_x = _axis(m[0], m[1], m[2], width, height, width)
    gy, in_y = _axis(m[3], m[4], m[5], height, height, width)
    grid = np.empty((height, width, 2), np.float32)
    grid[..., 0] = gx
    grid[..., 1] = gy
    return grid, np.broadcast_to(in_x & in_y, (height, width))


def warp_batch(x: torch.Tensor, matrices, modes, fill) -> torch.Tensor:
    """A float N x 3 x H x W batch of whole numbers, one matrix and mode per sample."""
    n, _, h, w = x.shape
    grids, insides = zip(*(sampling_grid(m, h, w) for m in matrices))
    grid = torch.from_numpy(np.stack(grids)).to(x.device, x.dtype)
    inside = torch.from_numpy(np.stack(insides)).to(x.device)
    out = torch.empty_like(x)
    for mode in set(modes):
        rows = torch.as_tensor(np.flatnonzero(np.asarray(modes) == mode), device=x.device)
        out[rows] = F.grid_sample(x[rows], grid[rows], mode=mode, padding_mode="border", align_corners=False)
    fill_img = torch.tensor(fill, dtype=x.dtype, device=x.device).reshape(1, 3, 1, 1)
    return torch.where(inside[:, None], out.round_().clamp_(0, 255), fill_img)


def warp_mask(mask: np.ndarray, matrix, fill: int) -> np.ndarray:
    """A mask (H x W, any integer dtype) on the image's sampling grid with grid_sample's nearest
    (no class is a blend of two), ``fill`` where the grid's point falls outside the image."""
    h, w = mask.shape
    grid, inside = sampling_grid(matrix, h, w)
    x = torch.from_numpy(mask.astype(np.float32))[None, None]   # class indices are exact in float32
    out = F.grid_sample(x, torch.from_numpy(grid)[None], mode="nearest", padding_mode="border", align_corners=False)
    out = out[0, 0].numpy().astype(mask.dtype)
    out[~inside] = fill
    return out


def warp_image(img: np.ndarray, matrix, mode: str, fill) -> np.ndarray:
    """One uint8 H x W x 3 image, as warp_batch on a batch of one (``fill`` whole numbers)."""
    h, w = img.shape[:2]
    grid, inside = sampling_grid(matrix, h, w)
    x = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1)[None]
    x = x.to(torch.float32, memory_format=torch.contiguous_format)   # planes: grid_sample's fast layout
    out = F.grid_sample(x, torch.from_numpy(grid)[None], mode=mode, padding_mode="border", align_corners=False)
    planes = out.round_().clamp_(0, 255)[0].to(torch.uint8).numpy()
    result = cv2.merge(list(planes))
    if not inside.all():
        colour = cv2.merge([np.full((h, w), v, np.uint8) for v in fill])
        cv2.copyTo(colour, np.logical_not(inside).view(np.uint8), result)
    return result
