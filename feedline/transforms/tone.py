"""Tone ops on the pixel values (torchvision's posterize, solarize, autocontrast, equalize;
PIL's ImageOps): numpy on one uint8 H x W x 3 image, torch on a float N x 3 x H x W batch of
whole numbers 0..255 with one parameter per sample. Both compute the same values; the numpy
side as 256-entry tables (cv2.LUT), cached per parameter where the parameter repeats."""
from __future__ import annotations

import functools

import cv2
import numpy as np
import torch

from .color import per_sample


# --- numpy, one image: 256-entry tables through cv2.LUT ---------------------------------

def _channels(img: np.ndarray) -> list[np.ndarray]:
    return cv2.split(np.ascontiguousarray(img))


def posterize_np(img: np.ndarray, bits: int) -> np.ndarray:
    """Keep the ``bits`` high bits of each value."""
    return img & np.uint8((0xFF << (8 - int(bits))) & 0xFF)


@functools.lru_cache(maxsize=512)
def _solarize_lut(threshold: float) -> np.ndarray:
    values = np.arange(256)
    inverted = values.astype(np.float32) >= np.float32(threshold)
    return np.where(inverted, 255 - values, values).astype(np.uint8)


def solarize_np(img: np.ndarray, threshold: float) -> np.ndarray:
    """Invert the values at or above ``threshold``, compared in float32 as torch compares a
    uint8 tensor with a Python float."""
    return cv2.LUT(img, _solarize_lut(float(threshold)))


@functools.lru_cache(maxsize=256)
def _solarize_add_lut(addition: float) -> np.ndarray:
    values = np.arange(256, dtype=np.float32)
    added = np.minimum(values + np.float32(addition), np.float32(255))
    return np.where(values < 128, added, values).astype(np.uint8)


def solarize_add_np(img: np.ndarray, addition: float) -> np.ndarray:
    """timm's SolarizeAdd: ``addition`` added to the values below 128, saturated at 255."""
    return cv2.LUT(img, _solarize_add_lut(float(addition)))


def invert_np(img: np.ndarray) -> np.ndarray:
    return cv2.bitwise_not(img)


@functools.lru_cache(maxsize=4096)
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
    planes = _channels(img)
    tables = [_stretch_lut(int(lo), int(hi)) for lo, hi, *_ in map(cv2.minMaxLoc, planes)]
    return cv2.merge([cv2.LUT(plane, table) for plane, table in zip(planes, tables)])


def _equalize_luts(hists: np.ndarray) -> np.ndarray:
    """PIL's ImageOps.equalize tables, one per row of 256-bin histograms (identity where a
    channel is degenerate)."""
    last_used = 255 - np.argmax(hists[:, ::-1] > 0, axis=1)
    rows = np.arange(len(hists))
    step = (hists.sum(axis=1) - hists[rows, last_used]) // 255
    lut = (np.cumsum(hists, axis=1) + (step // 2)[:, None]) // np.maximum(step, 1)[:, None]
    lut[:, 1:] = lut[:, :-1].copy()
    lut[:, 0] = 0
    identity = np.arange(256)
    return np.where((step > 0)[:, None], np.clip(lut, 0, 255), identity).astype(np.uint8)


def equalize_np(img: np.ndarray) -> np.ndarray:
    planes = _channels(img)
    hists = np.stack([cv2.calcHist([plane], [0], None, [256], [0, 256]).reshape(256) for plane in planes])
    luts = _equalize_luts(hists.astype(np.int64))
    return cv2.merge([cv2.LUT(plane, lut) for plane, lut in zip(planes, luts)])


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
