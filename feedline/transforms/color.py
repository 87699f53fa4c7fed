"""Colour ops that blend the image with a degenerate one, as torchvision's tensor path computes
them (transforms.v2.functional adjust_*): brightness, contrast, saturation, sharpness, plus
hue and grayscale.

torchvision computes on uint8 images in float32 and casts back to uint8, which truncates; its
grayscale is 0.2989 R + 0.587 G + 0.114 B, floored where it is blended. Each op has a numpy
version for one uint8 H x W x 3 image (factor a float) and a torch version for a float
N x 3 x H x W batch of whole numbers 0..255 (factor a tensor (N,), one per sample); both
follow those steps, so they agree to float32 rounding.
"""
from __future__ import annotations

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


# --- numpy, one image: float32 arithmetic, truncated back to uint8 as torchvision's cast ----

def _trunc_u8(x: np.ndarray) -> np.ndarray:
    return np.clip(x, 0, 255, out=x).astype(np.uint8)


def gray_f32(img: np.ndarray) -> np.ndarray:
    """float32 H x W x 1 luma, not yet truncated (torchvision's preserve_dtype=False)."""
    f = img.astype(np.float32)
    return (f[..., :1] * GRAY[0] + f[..., 1:2] * GRAY[1] + f[..., 2:] * GRAY[2])


def gray_np(img: np.ndarray) -> np.ndarray:
    """uint8 H x W luma, truncated as torchvision's rgb_to_grayscale."""
    return gray_f32(img)[..., 0].astype(np.uint8)


def blend_np(img: np.ndarray, other, factor: float) -> np.ndarray:
    """torchvision's _blend: img * factor + other * (1 - factor), clamped, truncated."""
    f = np.float32(factor)
    return _trunc_u8(img.astype(np.float32) * f + np.asarray(other, np.float32) * (np.float32(1.0) - f))


def brightness_np(img, factor):
    return _trunc_u8(img.astype(np.float32) * np.float32(factor))


def contrast_np(img, factor):
    mean = np.float32(np.floor(gray_f32(img)).mean(dtype=np.float64))
    return blend_np(img, mean, factor)


def saturation_np(img, factor):
    return blend_np(img, np.floor(gray_f32(img)), factor)


def sharpness_np(img, factor):
    if img.shape[0] <= 2 or img.shape[1] <= 2:
        return img
    out = img.astype(np.float32)
    blurred = np.rint(cv2.filter2D(out, -1, _SMOOTH, borderType=cv2.BORDER_REPLICATE))
    inner = out[1:-1, 1:-1]  # the border keeps its pixels, as torchvision
    inner += (blurred[1:-1, 1:-1] - inner) * np.float32(1.0 - float(factor))
    return _trunc_u8(out)


def hue_np(img, shift):
    """Rotate the hue by ``shift`` turns (-0.5..0.5) in float HSV, as torchvision's tensor path."""
    rgb = img.astype(np.float32)
    rgb *= 1 / 255
    h, s, v = cv2.split(cv2.cvtColor(rgb, cv2.COLOR_RGB2HSV))  # H in degrees
    h += 360.0 * (float(shift) % 1.0)  # OpenCV wraps a hue of 360..720 back, not a negative one
    out = cv2.cvtColor(cv2.merge((h, s, v)), cv2.COLOR_HSV2RGB)
    return _trunc_u8(out * np.float32(_HUE_SCALE))


def grayscale_np(img):
    return cv2.cvtColor(gray_np(img), cv2.COLOR_GRAY2RGB)


# --- torch, a batch with one factor per sample -----------------------------------------

def gray_t(x: torch.Tensor) -> torch.Tensor:
    """N x 1 x H x W luma, floored (whole numbers, as torchvision's uint8 path)."""
    r, g, b = x.unbind(dim=1)
    return r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).floor_().unsqueeze(1)


def blend_t(x, other, factor) -> torch.Tensor:
    f = per_sample(factor, x)
    return (f * x + (1 - f) * other).clamp_(0, 255).trunc_()


def brightness_t(x, factor):
    return (x * per_sample(factor, x)).clamp_(0, 255).trunc_()


def contrast_t(x, factor):
    return blend_t(x, gray_t(x).mean(dim=(1, 2, 3), keepdim=True), factor)


def saturation_t(x, factor):
    return blend_t(x, gray_t(x), factor)


def sharpness_t(x, factor):
    if x.shape[-2] <= 2 or x.shape[-1] <= 2:
        return x
    k = torch.as_tensor(_SMOOTH, dtype=x.dtype, device=x.device).expand(3, 1, 3, 3)
    out = x.clone()
    blurred = F.conv2d(x, k, groups=3).round_()
    inner = out[..., 1:-1, 1:-1]
    inner.add_((blurred - inner) * (1 - per_sample(factor, x)))
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
