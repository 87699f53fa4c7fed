"""Affine ops of the auto-augment family (shear, translate, rotate), nearest neighbour, with a
fill colour outside the image, computed as torchvision's tensor path computes them.

Each sample's op is torchvision's inverse affine matrix (``_get_inverse_affine_matrix``, in
float64, origin at the image centre); the sampling grid is built from it in float32 as
torchvision's ``_affine_grid`` builds it, and torch's ``grid_sample`` (nearest, zeros outside)
takes the pixels, ties on pixel edges included, for a float batch on any device. One uint8
image on a decode thread takes the same picks through index_maps, which computes them here
once per matrix and size (``warp_np`` is that path written directly, for sizes past its maps).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F


def inverse_matrix(center: tuple[float, float], angle: float, translate: tuple[float, float],
                   shear: tuple[float, float]) -> list[float]:
    """torchvision's _get_inverse_affine_matrix(center, angle, translate, scale=1, shear)."""
    rot, sx, sy = math.radians(angle), math.radians(shear[0]), math.radians(shear[1])
    cx, cy = center
    tx, ty = translate
    cos_sy, tan_sx = math.cos(sy), math.tan(sx)
    a = math.cos(rot - sy) / cos_sy
    b = -(a * tan_sx + math.sin(rot))
    c = math.sin(rot - sy) / cos_sy
    d = math.cos(rot) - c * tan_sx
    m = [d, -b, 0.0, -c, a, 0.0]
    m[2] += cx - m[0] * (cx + tx) - m[1] * (cy + ty)
    m[5] += cy - m[3] * (cx + tx) - m[4] * (cy + ty)
    return m


def shear_x(m: float, height: int, width: int) -> list[float]:
    """torchvision's ShearX(m): affine(shear=(degrees(atan(m)), 0), center=(0, 0))."""
    return inverse_matrix((-width * 0.5, -height * 0.5), 0.0, (0.0, 0.0), (math.degrees(math.atan(m)), 0.0))


def shear_y(m: float, height: int, width: int) -> list[float]:
    return inverse_matrix((-width * 0.5, -height * 0.5), 0.0, (0.0, 0.0), (0.0, math.degrees(math.atan(m))))


def translate(tx: float, ty: float) -> list[float]:
    """Move the image by whole pixels (tx right, ty down); torchvision passes int(magnitude)."""
    return inverse_matrix((0.0, 0.0), 0.0, (float(int(tx)), float(int(ty))), (0.0, 0.0))


def rotate(degrees: float) -> list[float]:
    """torchvision's rotate(degrees) (counter-clockwise) about the image centre, not expanded."""
    return inverse_matrix((0.0, 0.0), -(degrees % 360), (0.0, 0.0), (0.0, 0.0))


def affine_grid(matrix, height: int, width: int, device) -> torch.Tensor:
    """torchvision's _affine_grid for one float32 theta: 1 x H x W x 2."""
    theta = torch.tensor(matrix, dtype=torch.float32, device=device).reshape(1, 2, 3)
    base = torch.empty(1, height, width, 3, dtype=torch.float32, device=device)
    base[..., 0].copy_(torch.linspace((1.0 - width) * 0.5, (width - 1.0) * 0.5, steps=width, device=device))
    base[..., 1].copy_(torch.linspace((1.0 - height) * 0.5, (height - 1.0) * 0.5, steps=height,
                                      device=device).unsqueeze_(-1))
    base[..., 2].fill_(1)
    scaled = theta.transpose(1, 2).div_(torch.tensor([0.5 * width, 0.5 * height], dtype=torch.float32,
                                                     device=device))
    return base.view(1, height * width, 3).bmm(scaled).view(1, height, width, 2)


def _fill3(fill) -> tuple[float, float, float]:
    f = np.broadcast_to(np.asarray(fill, dtype=np.float64), (3,))
    return float(f[0]), float(f[1]), float(f[2])


def warp_t(x: torch.Tensor, matrices, fill=0) -> torch.Tensor:
    """A float N x 3 x H x W batch, one inverse matrix per sample; outside the image ``fill``."""
    n, _, h, w = x.shape
    grid = torch.cat([affine_grid(m, h, w, x.device) for m in matrices]).to(x.dtype)
    out = F.grid_sample(x, grid, mode="nearest", padding_mode="zeros", align_corners=False)
    colour = _fill3(fill)
    if any(colour):
        inside = F.grid_sample(torch.ones_like(x[:, :1]), grid, mode="nearest", padding_mode="zeros",
                               align_corners=False)
        fill_img = torch.tensor(colour, dtype=x.dtype, device=x.device).reshape(1, 3, 1, 1)
        out = torch.where(inside < 0.5, fill_img, out)
    return out


def warp_np(img: np.ndarray, matrix, fill=0) -> np.ndarray:
    """One uint8 H x W x 3 image through one inverse matrix (torch on the CPU, as warp_t)."""
    x = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1)[None].float()
    out = warp_t(x, [matrix], fill)
    return out[0].permute(1, 2, 0).round_().to(torch.uint8).numpy()
