"""transforms/blur.py: GaussianBlur against the kernel written out; its sigma follows its
argument."""
from __future__ import annotations

from draws_helpers import INDICES
import numpy as np
import pytest
import torch
import oracles_transforms as oracle
from feedline.transforms import GaussianBlur, RandomErasing, RandomGrayscale


PHOTOS = [oracle.photo(i) for i in range(3)]


def batched(fn, img: np.ndarray, *args) -> np.ndarray:
    """Run a torch op on a batch of one built from ``img``; back to uint8 H x W x 3."""
    x = torch.from_numpy(img).permute(2, 0, 1)[None].float()
    out = fn(x, *args)
    assert out.dtype == torch.float32 and torch.equal(out, out.round())  # whole numbers
    return out[0].permute(1, 2, 0).numpy().astype(np.uint8)

def diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.astype(np.int64) - b.astype(np.int64))


@pytest.mark.parametrize("kernel_size,sigma", [((5, 5), 1.3), ((3, 9), 2.0), ((7, 1), 0.4)])
def test_gaussian_blur_matches_the_kernel_written_out(kernel_size, sigma):
    op = GaussianBlur(kernel_size)
    for img in PHOTOS:
        ref = oracle.gaussian_blur(img, kernel_size, sigma)
        for out in (op.apply_cpu(img, {"sigma": sigma}),
                    batched(lambda x: op.apply_torch(x, {"sigma": np.array([sigma])}), img)):
            assert diff(out, ref).max() <= 1
            assert diff(out, ref).mean() < 0.05


def test_probabilities_and_sigma_follow_their_arguments():
    assert abs(RandomGrayscale(0.2).draw(1, 0, INDICES)["apply"].mean() - 0.2) < 0.01
    sigma = GaussianBlur(5, (0.5, 1.5)).draw(1, 0, INDICES)["sigma"]
    assert 0.5 <= sigma.min() and sigma.max() <= 1.5 and abs(sigma.mean() - 1.0) < 0.01
    p = RandomErasing(0.25).draw(1, 0, INDICES)
    assert abs(p["apply"].mean() - 0.25) < 0.01
