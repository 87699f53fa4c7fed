"""Colour ops that blend the image with a degenerate one (torchvision's adjust_* functions
and PIL's ImageEnhance): brightness, contrast, saturation, sharpness, plus hue and grayscale.

Each op has a numpy version for one uint8 H x W x 3 image (factor a float) and a torch
version for a float N x 3 x H x W batch of whole numbers 0..255 (factor a tensor (N,), one
per sample). Both round once per op, half to even, so they agree to rounding.
"""
from __future__ import annotations

import cv2
import numpy as np
import torch
import torch.nn.functional as F


GRAY = np.array([0.299, 0.587, 0.114], dtype=np.float32)  # ITU-R 601-2: PIL's "L", OpenCV's GRAY
_SMOOTH = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]], dtype=np.float32) / 13  # PIL's SMOOTH


def per_sample(f, x: torch.Tensor) -> torch.Tensor:
    """A batch's per-sample parameter ``f`` as an N x 1 x 1 x 1 tensor beside ``x``."""
    return torch.as_tensor(f, dtype=x.dtype, device=x.device).reshape(-1, 1, 1, 1)


# --- numpy / OpenCV, one image (OpenCV rounds to nearest and saturates, releasing the GIL) --

def gray_np(img: np.ndarray) -> np.ndarray:
    """uint8 H x W luma, rounded as PIL's convert("L")."""
    return cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)


def blend_np(img: np.ndarray, other: np.ndarray, factor: float) -> np.ndarray:
    return cv2.addWeighted(img, float(factor), other, 1.0 - float(factor), 0.0)


def brightness_np(img, factor):
    return cv2.addWeighted(img, float(factor), img, 0.0, 0.0)


def contrast_np(img, factor):
    mean = float(gray_np(img).mean())
    return cv2.addWeighted(img, float(factor), img, 0.0, (1.0 - float(factor)) * mean)


def saturation_np(img, factor):
    return blend_np(img, cv2.cvtColor(gray_np(img), cv2.COLOR_GRAY2RGB), factor)


def sharpness_np(img, factor):
    if img.shape[0] <= 2 or img.shape[1] <= 2:
        return img
    blurred = img.copy()
    inner = cv2.filter2D(img, -1, _SMOOTH, borderType=cv2.BORDER_REPLICATE)
    blurred[1:-1, 1:-1] = inner[1:-1, 1:-1]  # the border keeps its pixels, as PIL and torchvision
    return blend_np(img, blurred, factor)


def hue_np(img, shift):
    """Rotate the hue by ``shift`` turns (-0.5..0.5) in float HSV, as torchvision's tensor path."""
    rgb = img.astype(np.float32)
    rgb *= 1 / 255
    h, s, v = cv2.split(cv2.cvtColor(rgb, cv2.COLOR_RGB2HSV))  # H in degrees
    h += 360.0 * (float(shift) % 1.0)  # OpenCV wraps a hue of 360..720 back, not a negative one
    return cv2.convertScaleAbs(cv2.cvtColor(cv2.merge((h, s, v)), cv2.COLOR_HSV2RGB), alpha=255.0)


def grayscale_np(img):
    return cv2.cvtColor(gray_np(img), cv2.COLOR_GRAY2RGB)


# --- torch, a batch with one factor per sample -----------------------------------------

def gray_t(x: torch.Tensor) -> torch.Tensor:
    """N x 1 x H x W luma, rounded as gray_np's."""
    w = torch.as_tensor(GRAY, dtype=x.dtype, device=x.device).reshape(1, 3, 1, 1)
    return (x * w).sum(dim=1, keepdim=True).round_()


def blend_t(x, other, factor) -> torch.Tensor:
    f = per_sample(factor, x)
    return (f * x + (1 - f) * other).round_().clamp_(0, 255)


def brightness_t(x, factor):
    return blend_t(x, 0.0, factor)


def contrast_t(x, factor):
    return blend_t(x, gray_t(x).mean(dim=(1, 2, 3), keepdim=True), factor)


def saturation_t(x, factor):
    return blend_t(x, gray_t(x), factor)


def sharpness_t(x, factor):
    if x.shape[-2] <= 2 or x.shape[-1] <= 2:
        return x
    k = torch.as_tensor(_SMOOTH, dtype=x.dtype, device=x.device).expand(3, 1, 3, 3)
    blurred = x.clone()
    blurred[..., 1:-1, 1:-1] = F.conv2d(x, k, groups=3).round_()
    return blend_t(x, blurred, factor)


def _rgb_to_hsv(rgb: torch.Tensor) -> torch.Tensor:
    r, g, b = rgb.unbind(dim=1)
    maxc, minc = rgb.amax(dim=1), rgb.amin(dim=1)
    flat = maxc == minc
    span = maxc - minc
    s = span / torch.where(flat, torch.ones_like(maxc), maxc)
    span = torch.where(flat, torch.ones_like(span), span)
    rc, gc, bc = (maxc - r) / span, (maxc - g) / span, (maxc - b) / span
    h = torch.where(maxc == r, bc - gc, torch.where(maxc == g, 2.0 + rc - bc, 4.0 + gc - rc))
    h = torch.where(flat, torch.zeros_like(h), h)
    return torch.stack((torch.fmod(h / 6.0 + 1.0, 1.0), s, maxc), dim=1)


def _hsv_to_rgb(hsv: torch.Tensor) -> torch.Tensor:
    h, s, v = hsv.unbind(dim=1)
    i = torch.floor(h * 6.0)
    f = h * 6.0 - i
    i = i.to(torch.int64) % 6
    p = (v * (1.0 - s)).clamp(0, 1)
    q = (v * (1.0 - s * f)).clamp(0, 1)
    t = (v * (1.0 - s * (1.0 - f))).clamp(0, 1)
    # the six sectors of the hue circle: which of v, q, p, t each channel takes
    table = torch.stack([torch.stack(c, dim=1) for c in
                         ((v, q, p, p, t, v), (t, v, v, q, p, p), (p, p, t, v, v, q))], dim=1)
    return torch.gather(table, 2, i[:, None, None].expand(-1, 3, 1, -1, -1)).squeeze(2)


def hue_t(x, shift):
    hsv = _rgb_to_hsv(x / 255)
    hsv[:, 0] = torch.remainder(hsv[:, 0] + per_sample(shift, x)[:, 0], 1.0)
    return (_hsv_to_rgb(hsv) * 255).round_().clamp_(0, 255)


def grayscale_t(x):
    return gray_t(x).clamp_(0, 255).expand(-1, 3, -1, -1).contiguous()
