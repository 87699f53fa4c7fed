"""Tone ops on the pixel values (torchvision's posterize, solarize, autocontrast, equalize;
PIL's ImageOps): numpy on one uint8 H x W x 3 image, torch on a float N x 3 x H x W batch of
whole numbers 0..255 with one parameter per sample."""
from __future__ import annotations

import cv2
import numpy as np
import torch

from .color import per_sample


# --- numpy, one image ------------------------------------------------------------------

def posterize_np(img: np.ndarray, bits: int) -> np.ndarray:
    """Keep the ``bits`` high bits of each value."""
    return img & np.uint8((0xFF << (8 - int(bits))) & 0xFF)


def solarize_np(img: np.ndarray, threshold: float) -> np.ndarray:
    """Invert the values at or above ``threshold``, compared in float32 as torch compares a
    uint8 tensor with a Python float."""
    values = np.arange(256)
    inverted = values.astype(np.float32) >= np.float32(threshold)
    return cv2.LUT(img, np.where(inverted, 255 - values, values).astype(np.uint8))


def _stretch_lut(lo: int, hi: int) -> np.ndarray:
    """autocontrast's table for one channel as torchvision's tensor path: (v - lo) divided by
    (hi - lo) * (1 / 255) in float32, truncated."""
    values = np.arange(256, dtype=np.float32)
    if hi <= lo:
        return values.astype(np.uint8)
    inv_scale = np.float32(hi - lo) * np.float32(1.0 / 255)
    return np.clip((values - np.float32(lo)) / inv_scale, 0, 255).astype(np.uint8)


def autocontrast_np(img: np.ndarray) -> np.ndarray:
    """Stretch each channel to 0..255; a flat channel stays."""
    bounds = [cv2.minMaxLoc(channel)[:2] for channel in cv2.split(img)]
    lut = np.stack([_stretch_lut(int(lo), int(hi)) for lo, hi in bounds], axis=1)
    return cv2.LUT(img, lut.reshape(256, 1, 3))


def _equalize_lut(hist: np.ndarray) -> np.ndarray:
    """PIL's ImageOps.equalize table for one channel's histogram (identity when degenerate)."""
    used = hist[hist > 0]
    step = (int(hist.sum()) - int(used[-1])) // 255 if len(used) else 0
    if step == 0:
        return np.arange(256, dtype=np.uint8)
    lut = (np.cumsum(hist) + step // 2) // step
    return np.clip(np.concatenate([[0], lut[:-1]]), 0, 255).astype(np.uint8)


def equalize_np(img: np.ndarray) -> np.ndarray:
    hists = [cv2.calcHist([channel], [0], None, [256], [0, 256]).reshape(256).astype(np.int64)
             for channel in cv2.split(img)]
    lut = np.stack([_equalize_lut(h) for h in hists], axis=1)
    return cv2.LUT(img, lut.reshape(256, 1, 3))


# --- torch, a batch with one parameter per sample --------------------------------------

def posterize_t(x: torch.Tensor, bits) -> torch.Tensor:
    q = torch.pow(2.0, 8 - per_sample(bits, x))
    return torch.floor(x / q) * q


def solarize_t(x: torch.Tensor, threshold) -> torch.Tensor:
    return torch.where(x >= per_sample(threshold, x), 255 - x, x)


def autocontrast_t(x: torch.Tensor) -> torch.Tensor:
    lo = x.amin(dim=(2, 3), keepdim=True)
    hi = x.amax(dim=(2, 3), keepdim=True)
    inv_scale = torch.where(hi > lo, (hi - lo) * (1.0 / 255), torch.ones_like(hi))
    stretched = torch.floor((x - lo) / inv_scale)
    return torch.where(hi > lo, stretched.clamp_(0, 255), x)


def equalize_t(x: torch.Tensor) -> torch.Tensor:
    n, c, h, w = x.shape
    values = x.reshape(n * c, h * w).to(torch.int64)
    hist = torch.zeros(n * c, 256, dtype=torch.int64, device=x.device)
    hist.scatter_add_(1, values, torch.ones_like(values))
    last_used = 255 - torch.argmax(hist.flip(1).gt(0).to(torch.int8), dim=1)
    last = hist.gather(1, last_used[:, None])[:, 0]
    step = (hist.sum(dim=1) - last) // 255
    lut = (hist.cumsum(dim=1) + (step // 2)[:, None]) // step.clamp(min=1)[:, None]
    lut = torch.cat([torch.zeros_like(lut[:, :1]), lut[:, :-1]], dim=1).clamp_(0, 255)
    out = torch.where((step > 0)[:, None], lut.gather(1, values), values)
    return out.reshape(n, c, h, w).to(x.dtype)
