"""transforms/base.py: the checks every transform's arguments go through (one line naming the
transform, the argument and what it takes), and the rounding every op shares."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from feedline.transforms import ColorJitter, GaussianBlur, RandomErasing, RandomGrayscale, TransformError
from feedline.transforms.base import check_interval, check_probability, row, to_u8


@pytest.mark.parametrize("value", [-0.1, 1.5, "half", None])
def test_a_probability_outside_0_to_1_is_refused_by_name(value):
    with pytest.raises(ValueError, match=rf"Op: p must be a probability between 0 and 1, got {value!r}"):
        check_probability("Op", "p", value)
    assert check_probability("Op", "p", 1) == 1.0


@pytest.mark.parametrize("value, message", [
    (0.5, "must be a pair"), (("a", 1), "must be a pair"), ((2, 1), r"must satisfy 0.0 <= min <= max"),
    ((-1, 1), r"must satisfy 0.0 <= min <= max")])
def test_an_interval_must_be_an_ordered_pair_above_its_floor(value, message):
    with pytest.raises(ValueError, match=f"Op: scale {message}"):
        check_interval("Op", "scale", value)
    assert check_interval("Op", "scale", [0.1, 0.2]) == (0.1, 0.2)


def test_the_transforms_check_their_arguments_when_built():
    for make in (lambda: RandomGrayscale(2.0), lambda: RandomErasing(p=-1), lambda: GaussianBlur(4),
                 lambda: ColorJitter(brightness=-1)):
        with pytest.raises(ValueError):
            make()
    assert issubclass(TransformError, ValueError)


def test_to_u8_rounds_half_to_even_as_torch_and_saturates():
    x = np.array([-3.0, 0.5, 1.5, 2.5, 254.5, 255.5, 300.0])
    assert to_u8(x).tolist() == torch.from_numpy(x).round().clamp(0, 255).to(torch.uint8).tolist()
    assert to_u8(x).tolist() == [0, 0, 2, 2, 254, 255, 255]


def test_row_is_one_samples_parameters():
    params = {"a": np.arange(3), "b": np.arange(6).reshape(3, 2)}
    got = row(params, 1)
    assert got["a"] == 1 and got["b"].tolist() == [2, 3]
