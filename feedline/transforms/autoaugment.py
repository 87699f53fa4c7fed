"""RandAugment and TrivialAugmentWide, as torchvision defines them: the same 14 ops in the
same order, the same magnitude tables, signed magnitudes negated with probability 1/2,
nearest-neighbour geometry filled with ``fill``.

Each sample draws, per op slot, the op (uniform over the 14), the sign and (TrivialAugment)
the magnitude bin; the magnitude itself is looked up when applied, because TranslateX/Y in
RandAugment scale with the image size.
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from . import color, geometry, index_maps, tone
from .base import Params, SampleOp

OPS = ("Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
       "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize")
SIGNED = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
          "Contrast", "Sharpness"}
GEOMETRIC_OPS = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"}


_TOPS = {  # op -> (RandAugment's top, TrivialAugmentWide's top); translate's scale with the side
    "ShearX": (0.3, 0.99), "ShearY": (0.3, 0.99), "Rotate": (30.0, 135.0),
    "Brightness": (0.9, 0.99), "Color": (0.9, 0.99), "Contrast": (0.9, 0.99), "Sharpness": (0.9, 0.99),
}


@functools.lru_cache(maxsize=256)
def magnitude_table(op: str, bins: int, height: int, width: int, wide: bool) -> np.ndarray:
    """torchvision's _AUGMENTATION_SPACE[op](bins, height, width), built as torchvision builds
    it (float32 torch.linspace, float32 posterize arithmetic), as float64 of those values."""
    if op in _TOPS:
        table = torch.linspace(0.0, _TOPS[op][wide], bins, dtype=torch.float32)
    elif op in ("TranslateX", "TranslateY"):
        side = width if op == "TranslateX" else height
        table = torch.linspace(0.0, 32.0 if wide else 150.0 / 331.0 * side, bins, dtype=torch.float32)
    elif op == "Posterize":
        table = (8 - (torch.arange(bins) / ((bins - 1) / (6 if wide else 4)))).round().int()
    elif op == "Solarize":  # torchvision's threshold: 255.0 * float(linspace(1, 0)[bin])
        table = torch.linspace(1.0, 0.0, bins, dtype=torch.float32).double() * 255.0
    else:
        table = torch.zeros(bins)
    out = table.double().numpy()
    out.flags.writeable = False
    return out


def magnitude(op: str, bin_, bins: int, height: int, width: int, wide: bool):
    """torchvision's _augmentation_space(bins)[op][bin_] (unsigned), for RandAugment or,
    with ``wide``, TrivialAugmentWide; ``bin_`` may be an array."""
    return magnitude_table(op, int(bins), int(height), int(width), bool(wide))[np.asarray(bin_, dtype=np.int64)]


def _matrix(op: str, v: float, h: int, w: int) -> list[float]:
    if op == "ShearX":
        return geometry.shear_x(v, h, w)
    if op == "ShearY":
        return geometry.shear_y(v, h, w)
    if op == "TranslateX":
        return geometry.translate(v, 0.0)
    if op == "TranslateY":
        return geometry.translate(0.0, v)
    return geometry.rotate(v)


_ENHANCE_NP = {"Brightness": color.brightness_np, "Color": color.saturation_np,
               "Contrast": color.contrast_np, "Sharpness": color.sharpness_np}
_ENHANCE_T = {"Brightness": color.brightness_t, "Color": color.saturation_t,
              "Contrast": color.contrast_t, "Sharpness": color.sharpness_t}


def apply_op_np(op: str, img: np.ndarray, v: float, fill) -> np.ndarray:
    """torchvision's _apply_op on one uint8 image, ``v`` the signed magnitude."""
    if op in _ENHANCE_NP:
        return _ENHANCE_NP[op](img, 1.0 + v)
    if op == "Posterize":
        return tone.posterize_np(img, int(v))
    if op == "Solarize":
        return tone.solarize_np(img, v)
    if op == "AutoContrast":
        return tone.autocontrast_np(img)
    if op == "Equalize":
        return tone.equalize_np(img)
    if op == "Identity":
        return img
    if op == "TranslateX":
        return index_maps.shift(img, int(v), 0, fill)
    if op == "TranslateY":
        return index_maps.shift(img, 0, int(v), fill)
    return index_maps.warp_nearest(img, _matrix(op, float(v), *img.shape[:2]), fill)


def apply_op_mask(op: str, mask: np.ndarray, v: float, ignore_index: int) -> np.ndarray:
    """The same op on a mask: the geometric ones on the image's picks, the others leave it."""
    if op == "TranslateX":
        return index_maps.shift_mask(mask, int(v), 0, ignore_index)
    if op == "TranslateY":
        return index_maps.shift_mask(mask, 0, int(v), ignore_index)
    if op in GEOMETRIC_OPS:
        return index_maps.warp_mask(mask, _matrix(op, float(v), *mask.shape), ignore_index)
    return mask


def apply_op_t(op: str, x: torch.Tensor, v: np.ndarray, fill) -> torch.Tensor:
    """The same op on a float batch, ``v`` one signed magnitude per sample."""
    if op in _ENHANCE_T:
        return _ENHANCE_T[op](x, 1.0 + v)
    if op == "Posterize":
        return tone.posterize_t(x, np.trunc(v))
    if op == "Solarize":
        return tone.solarize_t(x, v)
    if op == "AutoContrast":
        return tone.autocontrast_t(x)
    if op == "Equalize":
        return tone.equalize_t(x)
    if op == "Identity":
        return x
    h, w = x.shape[-2:]
    return geometry.warp_t(x, [_matrix(op, float(m), h, w) for m in np.atleast_1d(v)], fill)


class _AutoAugment(SampleOp):
    """Shared by RandAugment and TrivialAugmentWide: ``_slots`` ops per sample."""

    wide = False
    _slots = 1

    def _bins(self, u: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def params(self, u: np.ndarray) -> Params:
        s = self._slots
        op = np.minimum((u[:, :s] * len(OPS)).astype(np.int64), len(OPS) - 1)
        negative = u[:, s:2 * s] < 0.5
        return {"op": op, "negative": negative, "bin": self._bins(u[:, 2 * s:])}

    def _signed(self, op: str, bins, negative, h: int, w: int):
        v = magnitude(op, bins, self.num_magnitude_bins, h, w, self.wide)
        return np.where(negative & (op in SIGNED), -v, v)

    def _magnitudes(self, p: dict, h: int, w: int):
        """(op, signed magnitude) of each of the sample's slots."""
        for k in range(self._slots):
            op = OPS[p["op"][k]]
            v = float(magnitude_table(op, self.num_magnitude_bins, h, w, self.wide)[p["bin"][k]])
            yield op, -v if p["negative"][k] and op in SIGNED else v

    def apply_cpu(self, image: np.ndarray, p: dict) -> np.ndarray:
        for op, v in self._magnitudes(p, *image.shape[:2]):
            image = apply_op_np(op, image, v, self.fill)
        return image

    def apply_mask(self, mask: np.ndarray, p: dict, ignore_index: int) -> np.ndarray:
        for op, v in self._magnitudes(p, *mask.shape):
            mask = apply_op_mask(op, mask, v, ignore_index)
        return mask

    def apply_torch(self, images: torch.Tensor, params: Params) -> torch.Tensor:
        h, w = images.shape[-2:]
        for k in range(self._slots):
            chosen = params["op"][:, k]
            for code in np.unique(chosen):
                rows = np.flatnonzero(chosen == code)
                v = self._signed(OPS[code], params["bin"][rows, k], params["negative"][rows, k], h, w)
                sel = torch.as_tensor(rows, device=images.device)
                images[sel] = apply_op_t(OPS[code], images[sel], v, self.fill)
        return images


def _check_fill(owner: str, fill):
    values = np.atleast_1d(np.asarray(0 if fill is None else fill, dtype=np.float64))
    if values.size not in (1, 3) or values.min() < 0 or values.max() > 255:
        raise ValueError(f"{owner}: fill must be one number or three, in 0..255, got {fill!r}")
    return 0 if fill is None else fill


class RandAugment(_AutoAugment):
    """torchvision's RandAugment(num_ops, magnitude, num_magnitude_bins, fill)."""

    def __init__(self, num_ops: int = 2, magnitude: int = 9, num_magnitude_bins: int = 31,
                 fill=None):
        if not isinstance(num_ops, int) or num_ops < 0:
            raise ValueError(f"RandAugment: num_ops must be an int >= 0, got {num_ops!r}")
        if not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 2:
            raise ValueError(f"RandAugment: num_magnitude_bins must be an int >= 2, got {num_magnitude_bins!r}")
        if not isinstance(magnitude, int) or not 0 <= magnitude < num_magnitude_bins:
            raise ValueError(f"RandAugment: magnitude must be an int in 0..{num_magnitude_bins - 1} "
                             f"(num_magnitude_bins={num_magnitude_bins}), got {magnitude!r}")
        self.num_ops, self.magnitude, self.num_magnitude_bins = num_ops, magnitude, num_magnitude_bins
        self.fill = _check_fill("RandAugment", fill)
        self._slots = num_ops
        self.DRAWS = 2 * num_ops

    def _bins(self, u: np.ndarray) -> np.ndarray:
        return np.full((len(u), self._slots), self.magnitude, dtype=np.int64)


class TrivialAugmentWide(_AutoAugment):
    """torchvision's TrivialAugmentWide(num_magnitude_bins, fill): one op, a random bin."""

    wide = True
    DRAWS = 3

    def __init__(self, num_magnitude_bins: int = 31, fill=None):
        if not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 2:
            raise ValueError(f"TrivialAugmentWide: num_magnitude_bins must be an int >= 2, "
                             f"got {num_magnitude_bins!r}")
        self.num_magnitude_bins = num_magnitude_bins
        self.fill = _check_fill("TrivialAugmentWide", fill)

    def _bins(self, u: np.ndarray) -> np.ndarray:
        return np.minimum((u * self.num_magnitude_bins).astype(np.int64), self.num_magnitude_bins - 1)
