"""timm's RandAugment config strings and magnitude-to-argument formulas
(timm.data.auto_augment, as of timm 1.0.31), without images: what ``rand-m9-mstd0.5-inc1``
means.

A magnitude M is a level on timm's scale of 0..10 (``_LEVEL_DENOM``): M / 10 of each op's
range, so m9 rotates up to 27 degrees. Each chosen op applies with probability p (0.5); with
``mstd`` S the magnitude of each application is drawn from N(M, S) (uniform in 0..M when S is
inf or above 100) and clipped to 0..``mmax`` (10 unless given).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

LEVEL_DENOM = 10.0

RAND_TRANSFORMS = ("AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize",
                   "SolarizeAdd", "Color", "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY",
                   "TranslateXRel", "TranslateYRel")
RAND_INCREASING_TRANSFORMS = ("AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing",
                              "SolarizeIncreasing", "SolarizeAdd", "ColorIncreasing", "ContrastIncreasing",
                              "BrightnessIncreasing", "SharpnessIncreasing", "ShearX", "ShearY",
                              "TranslateXRel", "TranslateYRel")
# ops whose argument timm negates with probability 1/2 (_randomly_negate)
NEGATED = {"Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel", "ColorIncreasing",
           "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing"}

GRAMMAR = "rand-mM-nN[-mstdS][-mmaxX][-incI][-pP], e.g. rand-m9-mstd0.5-inc1"


@dataclass(frozen=True)
class RandConfig:
    """A parsed ``rand-...`` string: timm's rand_augment_transform arguments."""

    magnitude: float = LEVEL_DENOM
    num_layers: int = 2
    magnitude_std: float = 0.0
    magnitude_max: float | None = None
    increasing: bool = False
    prob: float = 0.5

    @property
    def ops(self) -> tuple[str, ...]:
        return RAND_INCREASING_TRANSFORMS if self.increasing else RAND_TRANSFORMS


def parse_rand(config_str: str) -> RandConfig:
    """timm's rand_augment_transform grammar. Raises ValueError naming the part it cannot read."""
    if not isinstance(config_str, str):
        raise ValueError(f"TimmRandAugment: config_str must be a string like {GRAMMAR}, got {config_str!r}")
    parts = config_str.split("-")
    if parts[0] == "augmix":
        raise ValueError(f"{config_str!r}: timm's AugMix is not supported; use a RandAugment string, {GRAMMAR}")
    if parts[0] != "rand":
        raise ValueError(f"{config_str!r}: not a timm RandAugment string; expected {GRAMMAR}")
    found: dict = {}
    for part in parts[1:]:
        m = re.fullmatch(r"(mstd|mmax|inc|m|n|p|t)(.*)", part)
        if m is None or m.group(1) == "t" or not re.fullmatch(r"\d+(\.\d*)?|inf", m.group(2)):
            hint = ("; timm's weighted op sets (t...) are not supported" if part.startswith("t")
                    else "")
            raise ValueError(f"{config_str!r}: cannot read {part!r}; expected {GRAMMAR}{hint}")
        key, val = m.group(1), m.group(2)
        if key in ("m", "n", "mmax", "inc") and not val.isdigit():
            raise ValueError(f"{config_str!r}: {key} takes a whole number, got {part!r}")
        found[key] = val
    mstd = float(found.get("mstd", 0.0))
    prob = float(found.get("p", 0.5))
    if not 0.0 <= prob <= 1.0:
        raise ValueError(f"{config_str!r}: p is a probability in 0..1, got {prob}")
    return RandConfig(magnitude=float(int(found.get("m", 10))), num_layers=int(found.get("n", 2)),
                      magnitude_std=math.inf if mstd > 100 else mstd,
                      magnitude_max=float(found["mmax"]) if "mmax" in found else None,
                      increasing=bool(int(found.get("inc", 0))), prob=prob)


def noisy_magnitude(cfg: RandConfig, u1: np.ndarray, u2: np.ndarray) -> np.ndarray:
    """AugmentOp's magnitude for each application: N(M, S) (Box-Muller from two uniforms of the
    sample's own stream), uniform in 0..M when S is inf; clipped to 0..mmax (or 10)."""
    m = np.full(np.shape(u1), cfg.magnitude)
    if cfg.magnitude_std == math.inf:
        m = u1 * cfg.magnitude
    elif cfg.magnitude_std > 0:
        z = np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)
        m = cfg.magnitude + cfg.magnitude_std * z
    return np.clip(m, 0.0, cfg.magnitude_max or LEVEL_DENOM)


def level_to_arg(op: str, level: np.ndarray, negate: np.ndarray, translate_pct: float = 0.45) -> np.ndarray:
    """timm's LEVEL_TO_ARG[op](level) per sample, ``negate`` standing for _randomly_negate's draw."""
    frac = np.asarray(level, dtype=np.float64) / LEVEL_DENOM
    sign = np.where(negate, -1.0, 1.0)
    if op == "Rotate":
        return sign * frac * 30.0
    if op in ("ShearX", "ShearY"):
        return sign * frac * 0.3
    if op in ("TranslateXRel", "TranslateYRel"):
        return sign * frac * translate_pct
    if op in ("Color", "Contrast", "Brightness", "Sharpness"):
        return frac * 1.8 + 0.1
    if op.endswith("Increasing") and op[:-len("Increasing")] in ("Color", "Contrast", "Brightness", "Sharpness"):
        return np.maximum(0.1, 1.0 + sign * frac * 0.9)
    if op == "Posterize":
        return np.trunc(frac * 4)
    if op == "PosterizeIncreasing":
        return 4 - np.trunc(frac * 4)
    if op == "Solarize":
        return np.minimum(256, np.trunc(frac * 256))
    if op == "SolarizeIncreasing":
        return 256 - np.minimum(256, np.trunc(frac * 256))
    if op == "SolarizeAdd":
        return np.minimum(128, np.trunc(frac * 110))
    return np.zeros_like(frac)
