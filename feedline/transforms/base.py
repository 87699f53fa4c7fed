"""The shape of a per-sample transform: parameters drawn apart from applying them.

``draw(seed, epoch, indices)`` is a pure function of (seed, epoch, index) per sample,
vectorized over a batch (torchvision v2's make_params, kornia's generators). The same
parameters then drive two implementations: ``apply_cpu`` on one uint8 H x W x 3 array (a
decode thread; OpenCV and numpy release the GIL) and ``apply_torch`` on a float32
N x 3 x H x W batch holding whole numbers 0..255 (any device; the GPU side stream).
Parameters that depend on the image size (a translation, an erase box) are drawn as
uniforms and resolved against the size when applied.
"""
from __future__ import annotations

import copy
from typing import Any

import numpy as np

from ..planning.augment import uniforms
from ..core.errors import FeedlineError
from .streams import stream_of

Params = dict  # name -> numpy array with one row per sample


def row(params: Params, i: int) -> dict[str, Any]:
    """The parameters of the i-th sample of a drawn batch."""
    return {k: v[i] for k, v in params.items()}


def to_u8(x: np.ndarray) -> np.ndarray:
    """Round to the nearest whole number (half to even, as torch.round) and saturate."""
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def check_probability(owner: str, name: str, value) -> float:
    if not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{owner}: {name} must be a probability between 0 and 1, got {value!r}")
    return float(value)


def check_interval(owner: str, name: str, value, low: float = 0.0) -> tuple[float, float]:
    """A (min, max) pair with low <= min <= max."""
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{owner}: {name} must be a pair (min, max), got {value!r}") from None
    if not low <= lo <= hi:
        raise ValueError(f"{owner}: {name} must satisfy {low} <= min <= max, got {value!r}")
    return lo, hi


class SampleOp:
    """A built-in per-sample transform. Subclasses set ``DRAWS`` (uniforms per sample) and
    implement ``params`` (uniforms -> parameters), ``apply_cpu`` and ``apply_torch``."""

    DRAWS = 0
    _occurrence = 0

    @property
    def stream(self) -> int:
        return stream_of(type(self).__name__, self._occurrence)

    def with_occurrence(self, occurrence: int) -> "SampleOp":
        """A copy on the stream of the ``occurrence``-th transform of this class in a list."""
        op = copy.copy(self)
        op._occurrence = occurrence
        return op

    def draw(self, seed: int, epoch: int, indices) -> Params:
        """This transform's parameters for the samples ``indices`` of ``epoch``."""
        return self.params(uniforms(seed, epoch, indices, self.DRAWS, self.stream))

    def params(self, u: np.ndarray) -> Params:
        raise NotImplementedError

    def apply_cpu(self, image: np.ndarray, p: dict) -> np.ndarray:
        raise NotImplementedError

    def apply_torch(self, images, params: Params):
        raise NotImplementedError

    def apply_mask(self, mask: np.ndarray, p: dict, ignore_index: int) -> np.ndarray:
        """One sample's mask (H x W class indices) under the parameters its image had: moved by
        the geometric ops (nearest, ``ignore_index`` where no source pixel is), erased to
        ``ignore_index``; a photometric op leaves it as it is (this default)."""
        return mask

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_") and not k.isupper())
        return f"{type(self).__name__}({args})"


class TransformError(FeedlineError, ValueError):
    """A transform given or behaving wrongly: names the argument, the position in the list and,
    when a sample is at fault, its index."""
