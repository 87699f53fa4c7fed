"""feedline's torchvision-named ops against torchvision 0.29's own tensor-path outputs, kept in
tests/fixtures/torchvision_ops.npz (made by tests/fixtures/make_torchvision_ops.py in an
environment of its own): magnitude tables, every auto-augment op at every bin and sign, and
the colour ops at fixed factors, on both of feedline's paths (one uint8 image, a float batch)."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from feedline.transforms import color
from feedline.transforms.autoaugment import OPS, SIGNED, apply_op_np, apply_op_t, magnitude

FIXTURE = np.load(os.path.join(os.path.dirname(__file__), "fixtures", "torchvision_ops.npz"))
EXACT = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Posterize", "Solarize",
         "AutoContrast", "Equalize")
BLENDS = ("Brightness", "Color", "Contrast", "Sharpness")


def batch_of(img: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(img)).permute(0, 3, 1, 2).float()


def from_batch(x: torch.Tensor) -> np.ndarray:
    return x.permute(0, 2, 3, 1).round().clamp(0, 255).to(torch.uint8).numpy()


@pytest.mark.parametrize("policy", ["rand", "wide"])
def test_magnitude_tables_are_torchvisions_float32_tables(policy):
    tables = [k for k in FIXTURE.files if k.startswith(f"table/{policy}/")]
    assert len(tables) >= 5 * 10
    for key in tables:
        _, _, op, size = key.split("/")
        h, w = (int(v) for v in size.split("x"))
        want = FIXTURE[key].astype(np.float64)
        if op == "Solarize":
            want = 255.0 * want  # torchvision's threshold: bound * magnitude
        got = magnitude(op, np.arange(31), 31, h, w, policy == "wide")
        assert np.array_equal(got, want), key


def _ours(policy: str, op: str):
    """feedline's outputs of ``op`` at every bin (and sign) on both paths, as the fixture lays out."""
    img = FIXTURE["aa_input"]
    h, w = img.shape[:2]
    signs = (1.0, -1.0) if op in SIGNED else (1.0,)
    bins = np.arange(31) if op not in ("AutoContrast", "Equalize") else np.arange(1)
    v = np.array([[s * magnitude(op, b, 31, h, w, policy == "wide") for s in signs] for b in bins])
    one = np.stack([[apply_op_np(op, img, float(m), 0) for m in row] for row in v])
    batch = batch_of(np.broadcast_to(img, (v.size,) + img.shape))
    many = from_batch(apply_op_t(op, batch, v.reshape(-1), 0)).reshape(one.shape)
    return one, many


@pytest.mark.parametrize("policy", ["rand", "wide"])
@pytest.mark.parametrize("op", EXACT)
def test_geometric_and_tone_ops_are_exact_at_every_bin_and_sign(policy, op):
    want = FIXTURE[f"aa/{policy}/{op}"]
    one, many = _ours(policy, op)
    assert np.array_equal(one, want), np.argwhere(one != want)[:5]
    assert np.array_equal(many, want), np.argwhere(many != want)[:5]


@pytest.mark.parametrize("policy", ["rand", "wide"])
@pytest.mark.parametrize("op", BLENDS)
def test_blend_ops_are_within_half_a_level_on_average_at_every_bin(policy, op):
    want = FIXTURE[f"aa/{policy}/{op}"].astype(np.int64)
    for got in _ours(policy, op):
        diff = got.astype(np.int64) - want
        assert np.abs(diff).mean() < 0.5 and abs(diff.mean()) < 0.25, (op, np.abs(diff).mean(), diff.mean())
        assert np.abs(diff).max() <= 2


COLOR = {"brightness": (color.brightness_np, color.brightness_t),
         "contrast": (color.contrast_np, color.contrast_t),
         "saturation": (color.saturation_np, color.saturation_t),
         "sharpness": (color.sharpness_np, color.sharpness_t),
         "hue": (color.hue_np, color.hue_t)}


@pytest.mark.parametrize("name", sorted(COLOR))
def test_colour_adjustments_are_within_half_a_level_on_average(name):
    images, want = FIXTURE["color_input"], FIXTURE[f"color/{name}"].astype(np.int64)
    one_fn, batch_fn = COLOR[name]
    for p, expected in zip(FIXTURE[f"color/{name}/params"], want):
        one = np.stack([one_fn(img, float(p)) for img in images])
        many = from_batch(batch_fn(batch_of(images), np.full(len(images), p)))
        for got in (one, many):
            diff = got.astype(np.int64) - expected
            assert np.abs(diff).mean() < 0.5 and abs(diff.mean()) < 0.25, (name, p, np.abs(diff).mean())


def test_grayscale_is_torchvisions_weights_truncated():
    images, want = FIXTURE["color_input"], FIXTURE["color/grayscale"]
    one = np.stack([color.grayscale_np(img) for img in images])
    many = from_batch(color.grayscale_t(batch_of(images)))
    assert np.abs(one.astype(int) - want).max() <= 1 and (one != want).mean() < 0.01
    assert np.abs(many.astype(int) - want).max() <= 1 and (many != want).mean() < 0.01


def test_color_jitter_chained_is_within_half_a_level_on_average():
    from feedline.transforms import ColorJitter
    images = FIXTURE["color_input"]
    op = ColorJitter(brightness=0.9, contrast=0.9, saturation=0.9, hue=0.5)
    for factors, want in zip(FIXTURE["jitter/factors"], FIXTURE["jitter"].astype(np.int64)):
        order = np.arange(4)  # brightness, contrast, saturation, hue: the fixture's order
        one = np.stack([op.apply_cpu(img, {"factors": factors, "order": order}) for img in images])
        many = from_batch(op.apply_torch(batch_of(images), {"factors": np.tile(factors, (len(images), 1)),
                                                            "order": np.tile(order, (len(images), 1))}))
        for got in (one, many):
            diff = got.astype(np.int64) - want
            assert np.abs(diff).mean() < 0.5 and abs(diff.mean()) < 0.25, (factors, np.abs(diff).mean(), diff.mean())
