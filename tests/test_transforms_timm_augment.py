"""TimmRandAugment against timm 1.0.31: its grammar and level formulas written out here, its
ops against timm's own PIL outputs (tests/fixtures/timm_ops.npz, made by
tests/fixtures/make_timm_ops.py), and its draws (p per op, magnitude noise, op choice)."""
from __future__ import annotations


import os

import numpy as np

import pytest

import torch

from feedline.transforms import RandAugment, SampleTransforms, TimmRandAugment

from feedline.transforms.timm_augment import apply_timm_op

from feedline.transforms.timm_policy import level_to_arg

FIXTURE = np.load(os.path.join(os.path.dirname(__file__), "fixtures", "timm_ops.npz"))

TONE = ("AutoContrast", "Equalize", "Invert", "Posterize", "PosterizeIncreasing", "Solarize",
        "SolarizeIncreasing", "SolarizeAdd")

ENHANCE = ("Color", "Contrast", "Brightness", "Sharpness", "ColorIncreasing", "ContrastIncreasing",
           "BrightnessIncreasing", "SharpnessIncreasing")

GEOMETRY = ("Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")

def _ours(name: str, level: float, negate: bool) -> np.ndarray:
    img = FIXTURE["input"]
    arg = level_to_arg(name, np.array([level]), np.array([negate]))
    x = torch.from_numpy(np.array(img)).permute(2, 0, 1)[None].float()
    out = apply_timm_op(name, x, arg, np.array(["bilinear"]), (124, 116, 104))
    return out[0].permute(1, 2, 0).numpy().astype(np.int64)


def test_the_torchvision_name_keeps_torchvisions_arguments():
    op = RandAugment(num_ops=2, magnitude=9, num_magnitude_bins=31)
    assert (op.num_ops, op.magnitude, op.num_magnitude_bins) == (2, 9, 31)


@pytest.mark.parametrize("name", TONE + ENHANCE + GEOMETRY)
def test_each_op_is_timms_at_every_level_and_sign(name):
    want = FIXTURE[f"op/{name}"].astype(np.int64)
    for i, level in enumerate(FIXTURE["levels"]):
        for s, negate in enumerate((False, True)):
            diff = np.abs(_ours(name, level, negate) - want[i, s])
            if name in TONE and name != "AutoContrast":
                assert diff.max() == 0, (name, level, negate)
            elif name in ENHANCE or name == "AutoContrast":  # PIL's blends round where torch truncates
                assert diff.mean() < 0.6 and diff.max() <= 3, (name, level, negate, diff.mean())
            else:  # torch's bilinear against PIL's fixed-point bilinear, the same points sampled
                assert diff.mean() < 1.0 and (diff > 8).mean() < 0.01, (name, level, negate, diff.mean())


def test_each_layer_applies_with_p_and_picks_ops_uniformly():
    params = TimmRandAugment("rand-m9-n2").draw(1, 0, np.arange(20000))
    assert params["apply"].mean() == pytest.approx(0.5, abs=0.01)
    counts = np.bincount(params["op"].ravel(), minlength=15)
    assert counts.min() > 0.9 * counts.mean() and counts.max() < 1.1 * counts.mean()
    assert params["negate"].mean() == pytest.approx(0.5, abs=0.01)
    assert (params["level"] == 9.0).all()


def test_the_host_and_batched_paths_agree():
    img = FIXTURE["input"]
    ops = SampleTransforms([TimmRandAugment("rand-m9-mstd0.5-inc1")])
    one = np.stack([ops.apply(img, 3, 1, i) for i in range(16)])
    x = torch.from_numpy(np.stack([img] * 16)).permute(0, 3, 1, 2)
    many = ops.apply_batch(x, 3, 1, np.arange(16)).permute(0, 2, 3, 1).numpy()
    assert np.array_equal(one, many)
    assert (one != img).any(axis=(1, 2, 3)).mean() > 0.5
