"""Where each transform's randomness comes from.

Every transform draws from its own stream of the counter-based hash that feedline.planning.augment
uses for crops: a pure function of (seed, epoch, sample index, stream, draw). The stream is
named after the transform's class and its occurrence among transforms of that class, never
after its position in the list, so adding a transform never moves a crop or another
transform's parameters.
"""
from __future__ import annotations

import zlib

import numpy as np

_MASK64 = (1 << 64) - 1


def stream_of(name: str, occurrence: int = 0) -> int:
    """The stream of the ``occurrence``-th transform called ``name``: crc32 of the name below
    bit 32 and occurrence + 1 above, so it is never a small number feedline reserves (the
    crop's stream is 0, the substitutes' 0x5B57)."""
    return zlib.crc32(name.encode()) | ((occurrence + 1) << 32)


def generator(seed: int, epoch: int, key: int, stream: int) -> np.random.Generator:
    """A numpy Generator that is a pure function of (seed, epoch, key, stream): for user hooks
    (key = the sample index) and the mixers' Beta draws (key = the batch's first index)."""
    entropy = [seed & _MASK64, epoch & _MASK64, int(key) & _MASK64, stream & _MASK64]
    return np.random.Generator(np.random.Philox(np.random.SeedSequence(entropy)))
