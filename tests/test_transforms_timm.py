"""TimmRandAugment against timm 1.0.31: its grammar and level formulas written out here, its
ops against timm's own PIL outputs (tests/fixtures/timm_ops.npz, made by
tests/fixtures/make_timm_ops.py), and its draws (p per op, magnitude noise, op choice)."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

from feedline.transforms import RandAugment, SampleTransforms, TimmRandAugment
from feedline.transforms.timm_augment import apply_timm_op
from feedline.transforms.timm_policy import (RAND_INCREASING_TRANSFORMS, RAND_TRANSFORMS, level_to_arg,
                                             parse_rand)

FIXTURE = np.load(os.path.join(os.path.dirname(__file__), "fixtures", "timm_ops.npz"))
TONE = ("AutoContrast", "Equalize", "Invert", "Posterize", "PosterizeIncreasing", "Solarize",
        "SolarizeIncreasing", "SolarizeAdd")
ENHANCE = ("Color", "Contrast", "Brightness", "Sharpness", "ColorIncreasing", "ContrastIncreasing",
           "BrightnessIncreasing", "SharpnessIncreasing")
GEOMETRY = ("Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")


@pytest.mark.parametrize("text,want", [
    ("rand-m9-n2", dict(magnitude=9.0, num_layers=2, magnitude_std=0.0, increasing=False)),
    ("rand-m9-mstd0.5-inc1", dict(magnitude=9.0, num_layers=2, magnitude_std=0.5, increasing=True)),
    ("rand-m7-n3-mstd101-mmax12", dict(magnitude=7.0, num_layers=3, magnitude_std=math.inf, magnitude_max=12.0)),
    ("rand-mstd1", dict(magnitude=10.0, num_layers=2, magnitude_std=1.0)),
    ("rand-m9-inc0-p0.8", dict(increasing=False, prob=0.8)),
])
def test_the_grammar_is_timms(text, want):
    cfg = parse_rand(text)
    for key, value in want.items():
        assert getattr(cfg, key) == value, key
    assert cfg.ops == (RAND_INCREASING_TRANSFORMS if cfg.increasing else RAND_TRANSFORMS)


@pytest.mark.parametrize("text,match", [
    ("augmix-m5-w4-d2", "AugMix is not supported"), ("rand-m9-tweights", "weighted op sets"),
    ("rand-x3", "cannot read 'x3'"), ("trivial-m9", "not a timm RandAugment string"),
    ("rand-m9.5", "whole number"), ("rand-p1.5", "probability")])
def test_strings_timm_would_refuse_or_feedline_does_not_do_are_refused_clearly(text, match):
    with pytest.raises(ValueError, match=match):
        TimmRandAugment(text)


def test_the_torchvision_name_keeps_torchvisions_arguments():
    op = RandAugment(num_ops=2, magnitude=9, num_magnitude_bins=31)
    assert (op.num_ops, op.magnitude, op.num_magnitude_bins) == (2, 9, 31)


def test_level_formulas_are_timms_written_out():
    m = np.array([9.0])
    no, yes = np.array([False]), np.array([True])
    # timm: level / _LEVEL_DENOM (10) of each range
    assert level_to_arg("Rotate", m, no)[0] == pytest.approx(27.0)
    assert level_to_arg("Rotate", m, yes)[0] == pytest.approx(-27.0)
    assert level_to_arg("ShearX", m, no)[0] == pytest.approx(0.27)
    assert level_to_arg("TranslateXRel", m, yes)[0] == pytest.approx(-0.405)
    assert level_to_arg("Contrast", m, yes)[0] == pytest.approx(0.9 * 1.8 + 0.1)
    assert level_to_arg("ContrastIncreasing", m, yes)[0] == pytest.approx(1.0 - 0.81)
    assert level_to_arg("Posterize", m, no)[0] == int(0.9 * 4)
    assert level_to_arg("PosterizeIncreasing", m, no)[0] == 4 - int(0.9 * 4)
    assert level_to_arg("Solarize", m, no)[0] == int(0.9 * 256)
    assert level_to_arg("SolarizeIncreasing", m, no)[0] == 256 - int(0.9 * 256)
    assert level_to_arg("SolarizeAdd", m, no)[0] == int(0.9 * 110)
    # and against timm's own level functions at every fixture level and sign
    for key in (k for k in FIXTURE.files if k.startswith("arg/")):
        name = key.split("/")[1]
        for i, level in enumerate(FIXTURE["levels"]):
            for s, negate in enumerate((False, True)):
                got = level_to_arg(name, np.array([level]), np.array([negate]))[0]
                assert got == pytest.approx(FIXTURE[key][i, s]), (name, level, negate)


def _ours(name: str, level: float, negate: bool) -> np.ndarray:
    img = FIXTURE["input"]
    arg = level_to_arg(name, np.array([level]), np.array([negate]))
    x = torch.from_numpy(np.array(img)).permute(2, 0, 1)[None].float()
    out = apply_timm_op(name, x, arg, np.array(["bilinear"]), (124, 116, 104))
    return out[0].permute(1, 2, 0).numpy().astype(np.int64)


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


def test_magnitude_noise_is_normal_clipped_or_uniform():
    level = TimmRandAugment("rand-m5-mstd1").draw(1, 0, np.arange(20000))["level"].ravel()
    assert level.mean() == pytest.approx(5.0, abs=0.03) and level.std() == pytest.approx(1.0, abs=0.03)
    clipped = TimmRandAugment("rand-m9-mstd2").draw(1, 0, np.arange(20000))["level"].ravel()
    assert clipped.max() == 10.0 and (clipped == 10.0).mean() == pytest.approx(0.31, abs=0.02)  # 1 - Phi(0.5)
    assert TimmRandAugment("rand-m9-mstd2-mmax12").draw(1, 0, np.arange(5000))["level"].max() > 10.0
    uniform = TimmRandAugment("rand-m8-mstd101").draw(1, 0, np.arange(20000))["level"].ravel()
    assert uniform.min() >= 0 and uniform.max() <= 8 and uniform.mean() == pytest.approx(4.0, abs=0.1)


def test_the_host_and_batched_paths_agree():
    img = FIXTURE["input"]
    ops = SampleTransforms([TimmRandAugment("rand-m9-mstd0.5-inc1")])
    one = np.stack([ops.apply(img, 3, 1, i) for i in range(16)])
    x = torch.from_numpy(np.stack([img] * 16)).permute(0, 3, 1, 2)
    many = ops.apply_batch(x, 3, 1, np.arange(16)).permute(0, 2, 3, 1).numpy()
    assert np.array_equal(one, many)
    assert (one != img).any(axis=(1, 2, 3)).mean() > 0.5
