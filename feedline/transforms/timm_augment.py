"""TimmRandAugment: timm's RandAugment (``--aa rand-m9-mstd0.5-inc1``) with timm's meaning.

Per sample and per layer: an op uniform over timm's 15 (or, with inc1, its "increasing" set),
applied with probability p; a magnitude per application (timm_policy.noisy_magnitude); the
argument's sign (timm's _randomly_negate); and, for the geometric ops, bilinear or bicubic at
random as timm's default. Geometry follows PIL's Image.transform, which timm calls: an inverse
matrix applied to pixel centres, outside the image timm's fill, the ImageNet mean in pixels.

The ops run on a float batch (torch, any device) or on one image on a decode thread: there the
tone and colour ops run in numpy/OpenCV with the batch's float32 steps and the geometry samples
the same grid with the same grid_sample (timm_geometry), so both paths give the same pixels. Colour ops use feedline's blends
(torchvision's tensor arithmetic), within a level of PIL's ImageEnhance; torch's bicubic
(a = -0.75) stands in for PIL's (a = -0.5).
"""
from __future__ import annotations

import numpy as np
import torch

from ..core.config import IMAGENET_MEAN
from . import color, tone
from .base import Params, SampleOp
from .timm_geometry import pil_matrix, warp_batch, warp_image, warp_mask
from .timm_policy import NEGATED, RandConfig, level_to_arg, noisy_magnitude, parse_rand

_DRAWS_PER_LAYER = 6  # op, apply, negate, two for the magnitude's noise, interpolation
GEOMETRIC_OPS = {"Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel"}
_ENHANCE = {"Color": color.saturation_t, "Contrast": color.contrast_t,
            "Brightness": color.brightness_t, "Sharpness": color.sharpness_t}


def timm_fill(mean=IMAGENET_MEAN) -> tuple[int, int, int]:
    """timm's img_mean: tuple(min(255, round(255 * m)) for m in mean)."""
    return tuple(min(255, round(255 * m)) for m in mean)


def apply_timm_op(op: str, x: torch.Tensor, arg: np.ndarray, modes, fill) -> torch.Tensor:
    """timm's NAME_TO_OP[op] on a float batch of whole numbers 0..255, one argument per sample."""
    if op == "AutoContrast":
        return tone.autocontrast_t(x)
    if op == "Equalize":
        return tone.equalize_t(x)
    if op == "Invert":
        return 255 - x
    if op.startswith("Posterize"):
        return tone.posterize_t(x, arg)
    if op.startswith("Solarize") and op != "SolarizeAdd":
        return tone.solarize_t(x, arg)
    if op == "SolarizeAdd":
        return torch.where(x < 128, (x + color.per_sample(arg, x)).clamp_(max=255), x)
    base = op[:-len("Increasing")] if op.endswith("Increasing") else op
    if base in _ENHANCE:
        return _ENHANCE[base](x, arg)
    h, w = x.shape[-2:]
    return warp_batch(x, [pil_matrix(op, float(v), h, w) for v in arg], modes, fill)


_ENHANCE_NP = {"Color": color.saturation_np, "Contrast": color.contrast_np,
               "Brightness": color.brightness_np, "Sharpness": color.sharpness_np}


def apply_timm_op_np(op: str, img: np.ndarray, arg: float, mode: str, fill) -> np.ndarray:
    """The same op on one uint8 H x W x 3 image: tone and colour ops in numpy/OpenCV with the
    batch's float32 steps, geometry on the batch's grid (timm_geometry): the same pixels."""
    if op == "AutoContrast":
        return tone.autocontrast_np(img)
    if op == "Equalize":
        return tone.equalize_np(img)
    if op == "Invert":
        return tone.invert_np(img)
    if op.startswith("Posterize"):
        return tone.posterize_np(img, int(arg))
    if op.startswith("Solarize") and op != "SolarizeAdd":
        return tone.solarize_np(img, arg)
    if op == "SolarizeAdd":
        return tone.solarize_add_np(img, arg)
    base = op[:-len("Increasing")] if op.endswith("Increasing") else op
    if base in _ENHANCE_NP:
        return _ENHANCE_NP[base](img, arg)
    return warp_image(img, pil_matrix(op, arg, *img.shape[:2]), mode, fill)


class TimmRandAugment(SampleOp):
    """timm's rand_augment_transform(config_str): ``TimmRandAugment("rand-m9-mstd0.5-inc1")``.
    ``img_mean`` is the fill of the geometric ops (timm: the normalization mean in pixels);
    ``interpolation`` "random" (timm's default: bilinear or bicubic per op), "bilinear" or
    "bicubic"."""

    def __init__(self, config_str: str = "rand-m9-mstd0.5-inc1", img_mean=None,
                 interpolation: str = "random", translate_pct: float = 0.45):
        self.config_str = config_str
        self.config: RandConfig = parse_rand(config_str)
        self.img_mean = tuple(img_mean) if img_mean is not None else timm_fill()
        if len(self.img_mean) != 3 or not all(v == int(v) and 0 <= v <= 255 for v in self.img_mean):
            raise ValueError(f"TimmRandAugment: img_mean must be three whole numbers in 0..255 (PIL's fill "
                             f"colour), got {img_mean!r}")
        if interpolation not in ("random", "bilinear", "bicubic"):
            raise ValueError(f"TimmRandAugment: interpolation must be 'random', 'bilinear' or 'bicubic', "
                             f"got {interpolation!r}")
        self.interpolation = interpolation
        self.translate_pct = float(translate_pct)
        self.DRAWS = _DRAWS_PER_LAYER * self.config.num_layers

    def params(self, u: np.ndarray) -> Params:
        cfg, n = self.config, self.config.num_layers
        u = u.reshape(len(u), n, _DRAWS_PER_LAYER)
        ops = np.minimum((u[..., 0] * len(cfg.ops)).astype(np.int64), len(cfg.ops) - 1)
        level = noisy_magnitude(cfg, u[..., 3], u[..., 4])
        bicubic = (u[..., 5] < 0.5) if self.interpolation == "random" else np.full(ops.shape,
                                                                                 self.interpolation == "bicubic")
        return {"op": ops, "apply": u[..., 1] < cfg.prob, "negate": u[..., 2] > 0.5, "level": level,
                "bicubic": bicubic}

    def apply_torch(self, images: torch.Tensor, params: Params) -> torch.Tensor:
        ops = self.config.ops
        for k in range(self.config.num_layers):
            chosen = np.where(params["apply"][:, k], params["op"][:, k], -1)
            for code in np.unique(chosen[chosen >= 0]):
                rows = np.flatnonzero(chosen == code)
                name = ops[code]
                arg = level_to_arg(name, params["level"][rows, k],
                                   params["negate"][rows, k] & (name in NEGATED), self.translate_pct)
                modes = np.where(params["bicubic"][rows, k], "bicubic", "bilinear")
                sel = torch.as_tensor(rows, device=images.device)
                images[sel] = apply_timm_op(name, images[sel], arg, modes, self.img_mean)
        return images

    def _applied(self, p: dict):
        """(op, argument, interpolation) of each layer the sample applies."""
        ops = self.config.ops
        for k in range(self.config.num_layers):
            if p["apply"][k]:
                name = ops[p["op"][k]]
                arg = level_to_arg(name, np.asarray(p["level"][k]), np.asarray(p["negate"][k]) & (name in NEGATED),
                                   self.translate_pct)
                yield name, float(arg), "bicubic" if p["bicubic"][k] else "bilinear"

    def apply_cpu(self, image: np.ndarray, p: dict) -> np.ndarray:
        for name, arg, mode in self._applied(p):
            image = apply_timm_op_np(name, image, arg, mode, self.img_mean)
        return image

    def apply_mask(self, mask: np.ndarray, p: dict, ignore_index: int) -> np.ndarray:
        for name, arg, _ in self._applied(p):
            if name in GEOMETRIC_OPS:   # nearest on the image's grid, whichever filter the image had
                mask = warp_mask(mask, pil_matrix(name, arg, *mask.shape), ignore_index)
        return mask
