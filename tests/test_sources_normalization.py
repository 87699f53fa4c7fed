"""feedline.normalize: the loader's own normalization as a function, for batch transforms
(kornia's) that want 0..1 pixels from a ``mean=None`` loader; and kornia itself on that route."""
from __future__ import annotations

import pytest
import torch

import feedline
from feedline import FeedLoader, TransformSpec
from feedline.core.config import IMAGENET_MEAN, IMAGENET_STD

KW = dict(batch_size=8, train=False, size=32, device="cpu", decoder="opencv", num_workers=1)
LOW = (torch.tensor(0.0) - torch.tensor(IMAGENET_MEAN)) / torch.tensor(IMAGENET_STD)   # level 0, per channel
HIGH = (torch.tensor(1.0) - torch.tensor(IMAGENET_MEAN)) / torch.tensor(IMAGENET_STD)  # level 255


def first_batch(path, **kw) -> torch.Tensor:
    with FeedLoader(str(path), **KW, **kw) as loader:
        return next(iter(loader))[0]


def test_normalize_is_the_loaders_normalization(packed_lmdb):
    raw, normalized = first_batch(packed_lmdb, mean=None), first_batch(packed_lmdb)
    assert raw.dtype == torch.uint8 and normalized.dtype == torch.float32
    for pixels in (raw, raw.float() / 255):   # uint8 levels, or the 0..1 scale
        out = feedline.normalize(pixels)
        assert out.dtype == torch.float32 and torch.allclose(out, normalized, atol=1e-5)
    half = feedline.normalize(raw.contiguous(memory_format=torch.channels_last), dtype=torch.float16)
    assert half.dtype == torch.float16 and half.is_contiguous(memory_format=torch.channels_last)
    with pytest.raises(TypeError, match="uint8 .* or floating"):
        feedline.normalize(raw.long())


def test_kornia_batch_transforms_on_0_to_1_pixels_then_normalize(packed_lmdb):
    K = pytest.importorskip("kornia.augmentation", reason="needs kornia (pip install kornia; in the test extra)")
    torch.manual_seed(0)
    jitter = K.ColorJitter(0.4, 0.4, 0.4, 0.1, p=1.0)
    # The pitfall the README's example had: kornia clamps to 0..1, so normalized input comes
    # out with its negative values gone.
    normalized = first_batch(packed_lmdb)
    assert normalized.min() < 0 and jitter(normalized).min() >= 0
    steps = [lambda x, y: (x.float() / 255, y), lambda x, y: (jitter(x), y),
             lambda x, y: (feedline.normalize(x), y)]
    jittered = first_batch(packed_lmdb, mean=None, transforms=TransformSpec(batch_transforms=steps))
    assert jittered.shape == normalized.shape and jittered.dtype == torch.float32
    per_channel = jittered.transpose(0, 1).reshape(3, -1)
    assert (per_channel.min(1).values >= LOW - 1e-4).all() and (per_channel.max(1).values <= HIGH + 1e-4).all()
    assert (jittered - normalized).abs().mean() > 0.05   # jittered, and on the normalized scale
