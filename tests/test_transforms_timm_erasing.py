"""TimmRandomErasing against timm's RandomErasing._erase written out: the box as timm draws it,
the fill in normalized units per mode, on a normalized batch of real photos."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import oracles_transforms as oracle
from feedline.planning.augment import uniforms
from feedline.transforms import BatchTransforms, SampleTransforms, TimmRandomErasing
from feedline.transforms.base import TransformError

MEAN, STD = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])


def normalized(n: int = 6, h: int = 48, w: int = 64) -> torch.Tensor:
    x = torch.from_numpy(np.stack([oracle.photo(i, h, w) for i in range(n)])).permute(0, 3, 1, 2).float() / 255
    return (x - MEAN.reshape(1, 3, 1, 1)) / STD.reshape(1, 3, 1, 1)


def timm_box(u, img_h: int, img_w: int, min_area=0.02, max_area=1 / 3, min_aspect=0.3):
    """timm's _erase with count 1 and its random draws taken from ``u``: apply when
    u[0] < probability, then up to 10 tries of (area, log aspect), then top and left."""
    log_ratio = (math.log(min_aspect), math.log(1 / min_aspect))
    for attempt in range(10):
        target_area = (min_area + (max_area - min_area) * u[1 + attempt]) * img_h * img_w
        aspect_ratio = math.exp(log_ratio[0] + (log_ratio[1] - log_ratio[0]) * u[11 + attempt])
        h = int(round(math.sqrt(target_area * aspect_ratio)))
        w = int(round(math.sqrt(target_area / aspect_ratio)))
        if w < img_w and h < img_h:
            return int(u[21] * (img_h - h + 1)), int(u[22] * (img_w - w + 1)), h, w
    return 0, 0, 0, 0


def test_boxes_are_timms_and_apply_with_the_probability():
    op = TimmRandomErasing(probability=0.4, mode="pixel")
    indices = np.arange(3000)
    boxes = op.boxes(7, 2, indices, 48, 64)
    u = uniforms(7, 2, indices, op.DRAWS, op.stream)
    for k in range(300):
        want = timm_box(u[k], 48, 64) if u[k, 0] < 0.4 else None
        if want is None:
            assert boxes[k, 2] == 0
        else:
            assert tuple(boxes[k]) == want
    assert (boxes[:, 2] > 0).mean() == pytest.approx(0.4, abs=0.03)


@pytest.mark.parametrize("mode", ["const", "rand", "pixel"])
def test_the_box_is_filled_in_normalized_units_per_mode(mode):
    op = TimmRandomErasing(probability=1.0, mode=mode)
    x = normalized()
    out = op.apply_batch(x.clone(), 3, 0, np.arange(10, 16))
    boxes = op.boxes(3, 0, np.arange(10, 16), 48, 64)
    for i, (top, left, h, w) in enumerate(boxes):
        inside = torch.zeros(48, 64, dtype=torch.bool)
        inside[top:top + h, left:left + w] = True
        assert torch.equal(out[i][:, ~inside], x[i][:, ~inside])
        patch = out[i][:, inside]
        if mode == "const":
            assert torch.equal(patch, torch.zeros_like(patch))
        elif mode == "rand":  # one normal value per channel
            assert torch.equal(patch, patch[:, :1].expand_as(patch)) and patch[:, 0].abs().max() < 6
        else:
            assert patch.std() == pytest.approx(1.0, abs=0.2) and patch.mean().abs() < 0.3
            levels = (patch * STD.reshape(3, 1) + MEAN.reshape(3, 1)) * 255  # not pixel levels, nor clipped
            assert (levels - levels.round()).abs().max() > 0.1
            assert (levels < 0).any() or (levels > 255).any()


def test_the_same_samples_erase_the_same_way_in_any_batch_layout_and_dtype():
    x = normalized()
    chain = BatchTransforms([TimmRandomErasing(probability=1.0, mode="pixel")])
    plain, _ = chain.apply(x.clone(), None, 5, 1, np.arange(6))
    last, _ = chain.apply(x.clone().contiguous(memory_format=torch.channels_last), None, 5, 1, np.arange(6))
    half, _ = chain.apply(x.clone().to(torch.bfloat16), None, 5, 1, np.arange(6))
    two, _ = chain.apply(x[3:].clone(), None, 5, 1, np.arange(3, 6))
    assert torch.equal(plain, last) and torch.equal(plain[3:], two)
    assert torch.allclose(half.float(), plain, atol=0.05)


def test_uint8_batches_and_bad_arguments_are_refused_by_name():
    with pytest.raises(TransformError, match="normalized units"):
        TimmRandomErasing(mode="pixel").apply_batch(torch.zeros(2, 3, 8, 8, dtype=torch.uint8), 0, 0, [0, 1])
    with pytest.raises(ValueError, match="mode must be one of const, rand, pixel"):
        TimmRandomErasing(mode="noise")
    with pytest.raises(TransformError, match="belongs in batch_transforms"):
        SampleTransforms([TimmRandomErasing()])
