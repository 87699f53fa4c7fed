"""GaussianBlur, as torchvision defines it: a separable kernel of ``kernel_size`` taps (x, y),
sigma uniform in ``sigma`` per sample, reflected borders."""
from __future__ import annotations

import cv2
import numpy as np
import torch
import torch.nn.functional as F

from .base import Params, SampleOp, check_interval


def kernel1d(size: int, sigma) -> np.ndarray:
    """torchvision's _get_gaussian_kernel1d; ``sigma`` (n,) gives (n, size) rows."""
    half = (size - 1) * 0.5
    x = np.linspace(-half, half, size)
    pdf = np.exp(-0.5 * (x[None, :] / np.asarray(sigma, dtype=np.float64).reshape(-1, 1)) ** 2)
    return pdf / pdf.sum(axis=1, keepdims=True)


class GaussianBlur(SampleOp):
    """torchvision's GaussianBlur(kernel_size, sigma=(0.1, 2.0))."""

    DRAWS = 1

    def __init__(self, kernel_size, sigma=(0.1, 2.0)):
        ks = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        if len(ks) != 2 or not all(isinstance(k, int) and k > 0 and k % 2 == 1 for k in ks):
            raise ValueError(f"GaussianBlur: kernel_size must be an odd positive int or two, "
                             f"got {kernel_size!r}")
        if isinstance(sigma, (int, float)):
            sigma = (sigma, sigma)
        lo, hi = check_interval("GaussianBlur", "sigma", sigma)
        if lo <= 0:
            raise ValueError(f"GaussianBlur: sigma must be > 0, got {sigma!r}")
        self.kernel_size, self.sigma = ks, (lo, hi)

    def params(self, u: np.ndarray) -> Params:
        lo, hi = self.sigma
        return {"sigma": lo + (hi - lo) * u[:, 0]}

    def apply_cpu(self, image: np.ndarray, p: dict) -> np.ndarray:
        kx = kernel1d(self.kernel_size[0], p["sigma"])[0].astype(np.float32)
        ky = kernel1d(self.kernel_size[1], p["sigma"])[0].astype(np.float32)
        # uint8 in and out: OpenCV filters in float32 and rounds to the nearest, as to_u8 does
        return cv2.sepFilter2D(np.ascontiguousarray(image), -1, kx, ky, borderType=cv2.BORDER_REFLECT_101)

    def apply_torch(self, images: torch.Tensor, params: Params) -> torch.Tensor:
        n, c, h, w = images.shape
        kx_size, ky_size = self.kernel_size

        def taps(size):
            k = kernel1d(size, params["sigma"])
            return torch.as_tensor(np.repeat(k, c, axis=0), dtype=images.dtype, device=images.device)

        x = F.pad(images.reshape(1, n * c, h, w),
                  (kx_size // 2, kx_size // 2, ky_size // 2, ky_size // 2), mode="reflect")
        x = F.conv2d(x, taps(kx_size).reshape(n * c, 1, 1, kx_size), groups=n * c)
        x = F.conv2d(x, taps(ky_size).reshape(n * c, 1, ky_size, 1), groups=n * c)
        return x.reshape(n, c, h, w).round_().clamp_(0, 255)
