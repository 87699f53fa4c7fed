"""Colour ops that blend the image with a degenerate one, as torchvision's tensor path computes
them (transforms.v2.functional adjust_*): brightness, contrast, saturation, sharpness, plus
hue and grayscale.

torchvision computes on uint8 images in float32 and casts back to uint8, which truncates; its
grayscale is 0.2989 R + 0.587 G + 0.114 B, floored where it is blended. Each op has a numpy
version for one uint8 H x W x 3 image (factor a float) and a torch version for a float
N x 3 x H x W batch of whole numbers 0..255 (factor a tensor (N,), one per sample). Both
take the same float32 steps (no fused multiply-add, sums of whole numbers in float64), so
brightness, contrast, saturation, sharpness and grayscale give the same pixels on both; hue
(OpenCV's HSV against torchvision's formulas) agrees to float32 rounding. The numpy side
reads per-value steps from 256-entry tables (cv2.LUT) and takes the rest in OpenCV/numpy.
"""
from __future__ import annotations

import functools

import cv2
import numpy as np
import torch
import torch.nn.functional as F


GRAY = np.array([0.2989, 0.587, 0.114], dtype=np.float32)  # torchvision's tensor path
_SMOOTH = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]], dtype=np.float32) / 13  # PIL's SMOOTH
_HUE_SCALE = 255.0 + 1.0 - 1e-3  # torchvision's float -> uint8 conversion: scale, then truncate


def per_sample(f, x: torch.Tensor) -> torch.Tensor:
    """A batch's per-sample parameter ``f`` as an N x 1 x 1 x 1 tensor beside ``x``."""
    return torch.as_tensor(f, dtype=x.dtype, device=x.device).reshape(-1, 1, 1, 1)


# --- numpy, one image: the same float32 steps, as tables where a step is per value ------

def _trunc_u8(x: np.ndarray) -> np.ndarray:
    return np.clip(x, 0, 255, out=x).astype(np.uint8)


_GRAY_TABLES = tuple(np.arange(256, dtype=np.float32) * w for w in GRAY)   # each weight's products


def _luma_floor(planes) -> np.ndarray:
    r, g, b = planes
    luma = cv2.LUT(r, _GRAY_TABLES[0])
    luma += cv2.LUT(g, _GRAY_TABLES[1])
    luma += cv2.LUT(b, _GRAY_TABLES[2])
    return luma.astype(np.uint8)   # truncation: the luma is >= 0


def gray_floor_np(img: np.ndarray) -> np.ndarray:
    """uint8 H x W luma (r * 0.2989 + g * 0.587) + b * 0.114 in float32, floored; the products
    come from tables, so the sums are the only arithmetic."""
    return _luma_floor(cv2.split(np.ascontiguousarray(img)))


def _keep(f: float) -> tuple[np.float32, np.float32]:
    """(factor, 1 - factor) in float32, the second computed in float32 as a torch tensor does."""
    f32 = np.float32(f)
    return f32, np.float32(1.0) - f32


@functools.lru_cache(maxsize=1024)
def _blend_lut(factor: float, other: float) -> np.ndarray:
    """The table v -> trunc(clamp(v * factor + other * (1 - factor))), in float32."""
    f, keep = _keep(factor)
    values = np.arange(256, dtype=np.float32) * f + np.float32(other) * keep
    table = _trunc_u8(values)
    table.flags.writeable = False
    return table


def brightness_np(img, factor):
    return cv2.LUT(img, _blend_lut(float(factor), 0.0))


def contrast_np(img, factor):
    luma = gray_floor_np(img)
    mean = np.float32(cv2.sumElems(luma)[0] / luma.size)   # a sum of whole numbers: exact in float64
    return cv2.LUT(img, _blend_lut(float(factor), float(mean)))


def saturation_np(img, factor):
    f, keep = _keep(factor)
    planes = cv2.split(np.ascontiguousarray(img))   # planes: no broadcasting of the luma
    other = _luma_floor(planes).astype(np.float32)
    other *= keep
    out = []
    for plane in planes:
        blended = plane.astype(np.float32)
        blended *= f
        blended += other
        out.append(_trunc_u8(blended))
    return cv2.merge(out)


def sharpness_np(img, factor):
    """The inner pixels blended towards PIL's SMOOTH filter, the blur rounded to whole numbers:
    the exact blur is a whole number over 13, at least 1/26 from any half, far beyond float32
    error, so the rounded blur is the same whatever order the filter sums in (OpenCV here,
    torch's conv2d on a batch)."""
    if img.shape[0] <= 2 or img.shape[1] <= 2:
        return img
    keep = np.float32(1.0 - float(factor))   # 1 - factor in float64, as torchvision's _blend
    values = img.astype(np.float32)
    out = cv2.filter2D(values, -1, _SMOOTH, borderType=cv2.BORDER_REPLICATE)
    np.rint(out, out=out)
    out -= values
    out *= keep
    out += values
    result = _trunc_u8(out)
    result[0], result[-1] = img[0], img[-1]   # the border keeps its pixels, as torchvision
    result[:, 0], result[:, -1] = img[:, 0], img[:, -1]
    return result


def hue_np(img, shift):
    """Rotate the hue by ``shift`` turns (-0.5..0.5) in float HSV, as torchvision's tensor path."""
    rgb = img.astype(np.float32)
    rgb *= np.float32(1 / 255)
    hsv = cv2.cvtColor(rgb, cv2.COLOR_RGB2HSV)   # H in degrees
    # OpenCV wraps a hue of 360..720 back, not a negative one
    hsv = cv2.add(hsv, (360.0 * (float(shift) % 1.0), 0.0, 0.0, 0.0))
    out = cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)
    # x * 255.999 truncated: round(x * 255.999 - 0.5) but where that is a whole number (x >= 0)
    return cv2.convertScaleAbs(out, alpha=_HUE_SCALE, beta=-0.5)


def grayscale_np(img):
    return cv2.cvtColor(gray_floor_np(img), cv2.COLOR_GRAY2RGB)


# --- torch, a batch with one factor per sample -----------------------------------------

def gray_t(x: torch.Tensor) -> torch.Tensor:
    """N x 1 x H x W luma, floored (whole numbers, as torchvision's uint8 path); products and
    sums apart (no fused multiply-add), so the numpy side computes the same floats."""
    r, g, b = x.unbind(dim=1)
    return r.mul(float(GRAY[0])).add_(g.mul(float(GRAY[1]))).add_(b.mul(float(GRAY[2]))).floor_().unsqueeze(1)


def blend_t(x, other, factor) -> torch.Tensor:
    f = per_sample(factor, x)
    return (f * x + (1 - f) * other).clamp_(0, 255).trunc_()


def brightness_t(x, factor):
    return (x * per_sample(factor, x)).clamp_(0, 255).trunc_()


def contrast_t(x, factor):
    luma = gray_t(x)
    mean = luma.sum(dim=(1, 2, 3), keepdim=True, dtype=torch.float64) / luma[0].numel()
    return blend_t(x, mean.to(x.dtype), factor)


def saturation_t(x, factor):
    return blend_t(x, gray_t(x), factor)


def sharpness_t(x, factor):
    if x.shape[-2] <= 2 or x.shape[-1] <= 2:
        return x
    k = torch.as_tensor(_SMOOTH, dtype=x.dtype, device=x.device).expand(3, 1, 3, 3)
    out = x.clone()
    blurred = F.conv2d(x, k, groups=3).round_()
    inner = out[..., 1:-1, 1:-1]
    inner.add_((blurred - inner) * per_sample(1.0 - np.asarray(factor, dtype=np.float64), x))
    return out.clamp_(0, 255).trunc_()


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
    return (_hsv_to_rgb(hsv) * _HUE_SCALE).clamp_(0, 255).trunc_()


def grayscale_t(x):
    return gray_t(x).clamp_(0, 255).expand(-1, 3, -1, -1).contiguous()
