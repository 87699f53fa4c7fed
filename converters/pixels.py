"""Pixels to the stored form: 8-bit gray or RGB, shrunk if asked, encoded as baseline JPEG.

Conventions (documented for users in `feedline pack --help`):
- transparency (RGBA, LA, a palette's transparent colour) is composited on white;
- 16-bit samples are scaled to 8 bits (v / 257), 12-bit JPEG samples by v / 16;
- float images are taken as 0..1 when their maximum is <= 1, else as 0..255;
- gray stays gray (a one-component JPEG), everything else becomes RGB;
- colour JPEGs are 4:2:0 baseline, which libjpeg-turbo, nvJPEG and DALI all decode.
"""
from __future__ import annotations

import cv2
import numpy as np
from PIL import Image

_GRAY_MODES = ("1", "L")
_16BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")


def _composite_on_white(color: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    a = alpha.astype(np.float32)[..., None] / 255.0 if color.ndim == 3 else alpha.astype(np.float32) / 255.0
    out = color.astype(np.float32) * a + 255.0 * (1.0 - a)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def scale_to_8bit(array: np.ndarray, bits: int | None = None) -> np.ndarray:
    """Integer or float samples to uint8: ``bits`` (12, 16) says the sample range."""
    if array.dtype == np.uint8:
        return array
    if array.dtype.kind == "f":
        a = np.nan_to_num(array.astype(np.float32))
        top = 1.0 if a.size and a.max() <= 1.0 else 255.0
        return np.clip(np.rint(a * (255.0 / top)), 0, 255).astype(np.uint8)
    a = array.astype(np.int64)
    if bits is None:
        peak = int(a.max()) if a.size else 0
        bits = 8 if peak <= 255 else 16 if peak <= 65535 else 32
    top = (1 << bits) - 1
    return np.clip((a * 255 + top // 2) // top, 0, 255).astype(np.uint8)


def pil_to_array(im: Image.Image) -> np.ndarray:
    """A loaded PIL image as uint8 H x W (gray) or H x W x 3 (RGB)."""
    mode = im.mode
    if mode in _GRAY_MODES:
        return np.asarray(im.convert("L"))
    if mode == "LA" or mode == "La":
        la = np.asarray(im.convert("LA"))
        return _composite_on_white(la[..., 0], la[..., 1])
    if mode in _16BIT_MODES:
        return scale_to_8bit(np.asarray(im).astype(np.uint16), 16)
    if mode == "I":
        return scale_to_8bit(np.asarray(im))
    if mode == "F":
        return scale_to_8bit(np.asarray(im))
    if mode in ("P", "PA"):
        has_alpha = mode == "PA" or "transparency" in im.info
        im = im.convert("RGBA" if has_alpha else "RGB")
        mode = im.mode
    if mode in ("RGBA", "RGBa"):
        rgba = np.asarray(im.convert("RGBA"))
        return _composite_on_white(rgba[..., :3], rgba[..., 3])
    if mode != "RGB":
        im = im.convert("RGB")  # CMYK (Adobe inversion handled by PIL), YCbCr, LAB, HSV, ...
    return np.asarray(im)


def fit_max_side(array: np.ndarray, max_side: int | None) -> np.ndarray:
    """Shrink so that the longer side is at most ``max_side`` (area interpolation)."""
    h, w = array.shape[:2]
    if max_side is None or max(h, w) <= max_side:
        return array
    scale = max_side / max(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return cv2.resize(array, size, interpolation=cv2.INTER_AREA)


def encode_jpeg(array: np.ndarray, quality: int) -> bytes:
    """Baseline JPEG of a uint8 gray (H x W) or RGB (H x W x 3) array."""
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[..., 0]
    if array.ndim == 3:
        array = cv2.cvtColor(array, cv2.COLOR_RGB2BGR)
    params = [cv2.IMWRITE_JPEG_QUALITY, int(quality)]
    if array.ndim == 3:
        params += [cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420]
    ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(array), params)
    if not ok:
        raise ValueError(f"OpenCV could not encode a {array.shape} image as JPEG")
    return buf.tobytes()
