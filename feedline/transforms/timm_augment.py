"""TimmRandAugment: timm's RandAugment (``--aa rand-m9-mstd0.5-inc1``) with timm's meaning.

Per sample and per layer: an op uniform over timm's 15 (or, with inc1, its "increasing" set),
applied with probability p; a magnitude per application (timm_policy.noisy_magnitude); the
argument's sign (timm's _randomly_negate); and, for the geometric ops, bilinear or bicubic at
random as timm's default. Geometry follows PIL's Image.transform, which timm calls: an inverse
matrix applied to pixel centres, outside the image timm's fill, the ImageNet mean in pixels.

The ops run on a float batch (torch, any device); one image on a decode thread runs the same
code as a batch of one on the CPU, so both paths give the same pixels. Colour ops use
feedline's blends (torchvision's tensor arithmetic), within a level of PIL's ImageEnhance;
torch's bicubic (a = -0.75) stands in for PIL's (a = -0.5).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from ..config import IMAGENET_MEAN
from . import color, tone
from .base import Params, SampleOp
from .timm_policy import NEGATED, RandConfig, level_to_arg, noisy_magnitude, parse_rand

_DRAWS_PER_LAYER = 6  # op, apply, negate, two for the magnitude's noise, interpolation
_ENHANCE = {"Color": color.saturation_t, "Contrast": color.contrast_t,
            "Brightness": color.brightness_t, "Sharpness": color.sharpness_t}


def timm_fill(mean=IMAGENET_MEAN) -> tuple[int, int, int]:
    """timm's img_mean: tuple(min(255, round(255 * m)) for m in mean)."""
    return tuple(min(255, round(255 * m)) for m in mean)


def pil_matrix(op: str, v: float, height: int, width: int) -> tuple[float, ...]:
    """The 6 coefficients timm hands PIL's Image.transform (or Image.rotate builds)."""
    if op == "ShearX":
        return (1, v, 0, 0, 1, 0)
    if op == "ShearY":
        return (1, 0, 0, v, 1, 0)
    if op == "TranslateXRel":
        return (1, 0, v * width, 0, 1, 0)
    if op == "TranslateYRel":
        return (1, 0, 0, 0, 1, v * height)
    angle = -math.radians(v)  # Image.rotate(v): counter-clockwise about the centre
    a, b = round(math.cos(angle), 15), round(math.sin(angle), 15)
    cx, cy = width / 2.0, height / 2.0
    return (a, b, a * -cx + b * -cy + cx, -b, a, -b * -cx + a * -cy + cy)


def _warp(x: torch.Tensor, matrices, modes, fill) -> torch.Tensor:
    """PIL's affine transform: output pixel (x, y) samples the input at the matrix applied to
    (x + 0.5, y + 0.5); outside the input, ``fill``; inside, interpolated from edge-clamped pixels."""
    n, _, h, w = x.shape
    ys, xs = np.meshgrid(np.arange(h) + 0.5, np.arange(w) + 0.5, indexing="ij")
    m = np.asarray(matrices, dtype=np.float64).reshape(n, 6)
    xin = m[:, 0, None, None] * xs + m[:, 1, None, None] * ys + m[:, 2, None, None]
    yin = m[:, 3, None, None] * xs + m[:, 4, None, None] * ys + m[:, 5, None, None]
    inside = torch.as_tensor((xin >= 0) & (xin < w) & (yin >= 0) & (yin < h), device=x.device)
    grid = torch.as_tensor(np.stack([2 * xin / w - 1, 2 * yin / h - 1], -1), dtype=x.dtype, device=x.device)
    out = torch.empty_like(x)
    for mode in set(modes):
        rows = torch.as_tensor(np.flatnonzero(np.asarray(modes) == mode), device=x.device)
        out[rows] = F.grid_sample(x[rows], grid[rows], mode=mode, padding_mode="border", align_corners=False)
    fill_img = torch.tensor(fill, dtype=x.dtype, device=x.device).reshape(1, 3, 1, 1)
    return torch.where(inside[:, None], out.round_().clamp_(0, 255), fill_img)


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
    return _warp(x, [pil_matrix(op, float(v), h, w) for v in arg], modes, fill)


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
        if len(self.img_mean) != 3 or not all(0 <= v <= 255 for v in self.img_mean):
            raise ValueError(f"TimmRandAugment: img_mean must be three numbers in 0..255, got {img_mean!r}")
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

    def apply_cpu(self, image: np.ndarray, p: dict) -> np.ndarray:
        x = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)[None].float()
        out = self.apply_torch(x, {k: np.asarray(v)[None] for k, v in p.items()})
        return out[0].permute(1, 2, 0).to(torch.uint8).numpy()
