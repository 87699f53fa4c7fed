"""Which record stands in for one that cannot be decoded (``on_error="substitute"``).

A pure function of (seed, epoch, index, attempt), shared by every engine, so all deliver
the same batches whatever the worker count or resume point.
"""
from __future__ import annotations

from typing import Callable, TypeVar

import numpy as np

from ..planning.augment import AugmentSpec, plan as plan_augment, uniforms

# The uniforms stream reserved for substitutes: crop and flip draws use stream 0.
SUBSTITUTE_STREAM = 0x5B57
MAX_ATTEMPTS = 16

T = TypeVar("T")


def substitute_index(seed: int, epoch: int, index: int, attempt: int, n: int) -> int:
    """The record that replaces bad record ``index`` of ``epoch`` at try ``attempt`` (0, 1, ...):
    uniform over the other ``n - 1`` records. A caller whose substitute is bad too tries
    attempt + 1, so the pick is the first attempt that decodes."""
    if n < 2:
        raise ValueError(f"cannot substitute record {index}: the data set has {n} record(s)")
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    u = uniforms(seed, epoch, [index], attempt + 1, stream=SUBSTITUTE_STREAM)[0, attempt]
    pick = min(int(u * (n - 1)), n - 2)
    return pick + 1 if pick >= index else pick


def substitute_sample(spec: AugmentSpec, seed: int, epoch: int, index: int, attempt: int,
                      sizes: np.ndarray) -> tuple[int, np.ndarray, bool]:
    """The substitute of ``index`` at ``attempt`` with its own crop box (int64 top, left,
    height, width) and flip for ``epoch``: the parameters it has as an ordinary sample."""
    sub = substitute_index(seed, epoch, index, attempt, len(sizes))
    h, w = sizes[sub]
    boxes, flips = plan_augment(spec, seed, epoch, [sub], [h], [w])
    return sub, boxes[0], bool(flips[0])


def first_substitute(spec: AugmentSpec, seed: int, epoch: int, index: int, sizes: np.ndarray,
                     attempt: Callable[[int, tuple, bool], T]) -> tuple[int, tuple, bool, T] | None:
    """The rule's first substitute of ``index`` that ``attempt(record, box, flip)`` delivers
    without raising: (record, its crop box, its flip, what ``attempt`` made); None when
    none of the MAX_ATTEMPTS does."""
    for n in range(MAX_ATTEMPTS):
        other, box, flip = substitute_sample(spec, seed, epoch, index, n, sizes)
        box = tuple(np.asarray(box).tolist())   # ints, or an evaluation crop's fractional edges
        try:
            made = attempt(other, box, flip)
        except Exception:  # this substitute is bad too: the rule's next one
            continue
        return other, box, flip, made
    return None
