"""transforms/timm_policy.py: timm's rand-augment grammar, its level formulas and its
magnitude noise, written out as timm 1.0.31 has them."""
from __future__ import annotations

import math

import os

import numpy as np

import pytest


from feedline.transforms import TimmRandAugment


from feedline.transforms.timm_policy import (RAND_INCREASING_TRANSFORMS, RAND_TRANSFORMS, level_to_arg,
                                             parse_rand)

FIXTURE = np.load(os.path.join(os.path.dirname(__file__), "fixtures", "timm_ops.npz"))


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


def test_magnitude_noise_is_normal_clipped_or_uniform():
    level = TimmRandAugment("rand-m5-mstd1").draw(1, 0, np.arange(20000))["level"].ravel()
    assert level.mean() == pytest.approx(5.0, abs=0.03) and level.std() == pytest.approx(1.0, abs=0.03)
    clipped = TimmRandAugment("rand-m9-mstd2").draw(1, 0, np.arange(20000))["level"].ravel()
    assert clipped.max() == 10.0 and (clipped == 10.0).mean() == pytest.approx(0.31, abs=0.02)  # 1 - Phi(0.5)
    assert TimmRandAugment("rand-m9-mstd2-mmax12").draw(1, 0, np.arange(5000))["level"].max() > 10.0
    uniform = TimmRandAugment("rand-m8-mstd101").draw(1, 0, np.arange(20000))["level"].ravel()
    assert uniform.min() >= 0 and uniform.max() <= 8 and uniform.mean() == pytest.approx(4.0, abs=0.1)
