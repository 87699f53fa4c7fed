"""Mixing a CPU batch in one pass over its memory, a pair of samples at a time.

The whole-batch way (copy the partners, multiply the batch, multiply the copy, add) reads
the batch's memory five times and writes it four. Here a unit of one or two samples
("rows": a sample's pixels are one dense block in either memory layout) is read once with
its partners, mixed while it is in cache, and written back once; a CutMix box is copied
alone. Each unit's partners are still unmixed when the unit runs: timm's partners
(sample n - 1 - i) form pairs, torchvision's (sample i - 1) a chain mixed from the last
sample down, the first sample's partner kept aside before the last is mixed.

The arithmetic is timm's and torchvision's: a blended pixel is fl(fl(x * w) + fl(p * w1))
in float32 (numpy's float32 multiply and add, the IEEE operations of torch's kernels); a
float16, bfloat16 or uint8 unit is converted into float32 scratch rows by torch and rounded
back as torch's conversions round (uint8 rounded half to even and clamped to 0..255 first).
A box is copied bit for bit, and, as in timm's loop, a cut sample is written only in its box
and a sample neither blended nor cut not at all. A few numpy calls per pair, each releasing
the GIL while it runs.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from .scratch import Scratch

FLIP, ROLL = "flip", "roll"   # timm's partners (x.flip(0)), torchvision's (x.roll(1, 0))
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.uint8)
# Below these (in float32 bytes), the whole-batch way is cheaper: its passes stay in cache, and
# a unit's few calls cost more than its arithmetic.
MIN_ROW_BYTES, MIN_BATCH_BYTES = 32 * 1024, 4 * 1024 * 1024
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32}
_SCRATCH_ROWS = 9   # float32 rows: 2 partner terms, 3 converted, 2 boxes, the first sample's term and box


@dataclass(frozen=True)
class RowDraw:
    """Per sample: its weights (float32), whether it blends or takes a box, and the box
    (y0, y1, x0, x1)."""

    w: np.ndarray
    w1: np.ndarray
    blend: np.ndarray
    cut: np.ndarray
    boxes: np.ndarray

    @classmethod
    def of(cls, lam, cutting, boxes, one_draw: bool) -> "RowDraw":
        """timm's weights: with one lambda per batch (``one_draw``) 1 - lambda is taken in
        double, as a Python float; with one per sample in float32, as timm's lam_batch."""
        lam, cut = np.asarray(lam, np.float64), np.asarray(cutting, bool)
        w = lam.astype(np.float32)
        w1 = (1.0 - lam).astype(np.float32) if one_draw else np.float32(1) - w
        return cls(w, w1, ~cut & (lam != 1.0), cut, np.asarray(boxes))


@dataclass(frozen=True)
class Unit:
    """Samples ``rows`` and their ``partners``, both views of the samples ``span`` (start,
    step, count) through ``own`` and ``other``; ``other`` None: the partner was kept aside."""

    rows: tuple
    partners: tuple
    span: tuple
    own: slice
    other: slice | None


def fits(x: torch.Tensor) -> bool:
    """Whether ``x`` (N x C x H x W) is mixed here: on the CPU, a dtype above, each sample one
    dense block (contiguous or channels_last), samples and batch too large for the cache."""
    return (x.device.type == "cpu" and x.dim() == 4 and x.dtype in DTYPES and not x.requires_grad
            and len(x) > 0 and (x.is_contiguous() or x.is_contiguous(memory_format=torch.channels_last))
            and x[0].numel() * 4 >= MIN_ROW_BYTES and x.numel() * 4 >= MIN_BATCH_BYTES)


@functools.lru_cache(maxsize=16)
def units(pairing: str, n: int) -> tuple[Unit, ...]:
    """The units of a batch of ``n``, in an order that leaves each unit's partners unmixed."""
    if pairing == FLIP:
        out = [Unit((i, n - 1 - i), (n - 1 - i, i), (i, n - 1 - 2 * i, 2), slice(None), slice(None, None, -1))
               for i in range(n // 2)]
        if n % 2:
            out.append(Unit((n // 2,), (n // 2,), (n // 2, 1, 1), slice(None), slice(None)))
        return tuple(out)
    out, top = [], n - 1
    while top >= 1:   # samples top - g + 1 .. top with partners top - g .. top - 1
        g = min(2, top)
        out.append(Unit(tuple(range(top - g + 1, top + 1)), tuple(range(top - g, top)), (top - g, 1, g + 1),
                        slice(1, None), slice(0, g)))
        top -= g
    return tuple(out) + (Unit((0,), (n - 1,), (0, 1, 1), slice(None), None),)


def _rows_view(a, span: tuple):
    start, step, count = span
    return a[start::step][:count]


class _Batch:
    """One call's views: the samples as float32 rows (float32 batches), as torch rows (the
    others, converted a unit at a time), as bits (boxes); the draw as Python values; the
    scratch carved up."""

    def __init__(self, x: torch.Tensor, draw: RowDraw, scratch: Scratch):
        n = len(x)
        self.w, self.w1 = draw.w[:, None], draw.w1[:, None]
        if draw.w.min() == draw.w.max() and draw.w1.min() == draw.w1.max():   # one pair of weights
            self.shared = (np.full((2, 1), draw.w[0]), np.full((2, 1), draw.w1[0]))
        else:
            self.shared = None
        self.blend, self.cut = draw.blend.tolist(), draw.cut.tolist()
        self.box = [(slice(None), slice(y0, y1), slice(x0, x1)) if cut else None
                    for (y0, y1, x0, x1), cut in zip(np.asarray(draw.boxes).tolist(), self.cut)]
        self.last = not x.is_contiguous()   # channels_last: a box kept as (h, w, c)
        self.channels = x.shape[1]
        flat = (x.permute(0, 2, 3, 1) if self.last else x).reshape(n, -1)
        self.direct, self.uint8 = x.dtype == torch.float32, x.dtype == torch.uint8
        self.rows = flat.numpy() if self.direct else None
        self.rows_t = flat
        self.bits = x.view(_BITS[x.element_size()]).numpy()
        size = flat.shape[1]
        buf_t = scratch.empty((_SCRATCH_ROWS * size,), torch.float32, "cpu")
        buf = buf_t.numpy().reshape(_SCRATCH_ROWS, size)
        self.terms, self.converted, self.converted_t = buf[0:2], buf[2:5], buf_t.view(_SCRATCH_ROWS, size)[2:5]
        self.box_space = buf[5:7].reshape(-1).view(self.bits.dtype)
        self.kept_term, self.kept_box = buf[7:8], buf[8].view(self.bits.dtype)

    def box_scratch(self, flat: np.ndarray, count: int, box: tuple) -> np.ndarray:
        """A dense array in ``flat`` shaped like ``count`` samples' ``box`` (C x h x w indexing)."""
        c, h, w = self.channels, box[1].stop - box[1].start, box[2].stop - box[2].start
        if self.last:
            return flat[:count * c * h * w].reshape(count, h, w, c).transpose(0, 3, 1, 2)
        return flat[:count * c * h * w].reshape(count, c, h, w)

    def load(self, span: tuple) -> np.ndarray:
        """The float32 rows of ``span``: the batch's memory, or a converted copy."""
        if self.direct:
            return _rows_view(self.rows, span)
        self.converted_t[:span[2]].copy_(_rows_view(self.rows_t, span))
        return self.converted[:span[2]]

    def store(self, unit: Unit, which: list[int], mixed: np.ndarray) -> None:
        """The blended rows ``which`` of the unit back into the batch, converted."""
        if self.direct:
            return
        if self.uint8:
            np.rint(mixed, out=mixed)
            np.clip(mixed, 0, 255, out=mixed)
        target = _rows_view(self.rows_t, unit.span)[unit.own]
        source = self.converted_t[:unit.span[2]][unit.own]
        if len(which) == len(unit.rows):
            target.copy_(source)
        else:
            for r in which:
                target[r].copy_(source[r])


def mix_rows(x: torch.Tensor, pairing: str, draw: RowDraw, scratch: Scratch) -> torch.Tensor:
    """``x`` mixed in place (see the module's docstring); ``fits(x)`` must hold."""
    batch = _Batch(x, draw, scratch)
    n = len(x)
    if pairing == ROLL:   # the first sample's partner, the last, is mixed first: keep what it needs
        if batch.blend[0]:
            np.multiply(batch.load((n - 1, 1, 1)), batch.w1[0], out=batch.kept_term)
        if batch.cut[0]:
            np.copyto(batch.box_scratch(batch.kept_box, 1, batch.box[0])[0], batch.bits[n - 1][batch.box[0]])
    for unit in units(pairing, n):
        blend = [batch.blend[k] for k in unit.rows]
        cut = [batch.cut[k] for k in unit.rows]
        if any(cut):
            boxes = _cut(batch, unit, cut)   # the partners' boxes read before anything is written
        if any(blend):
            _blend(batch, unit, blend)
        if any(cut):
            _paste(batch, unit, cut, boxes)
    return x


def _cut(batch: _Batch, unit: Unit, cut: list[bool]) -> list:
    """Copies of the partners' pixels in the boxes: one copy for a unit sharing one box."""
    if unit.other is None:
        return [batch.box_scratch(batch.kept_box, 1, batch.box[0])]
    rows = [batch.box[k] for k in unit.rows]
    if all(cut) and rows.count(rows[0]) == len(rows):
        kept = batch.box_scratch(batch.box_space, len(rows), rows[0])
        np.copyto(kept, _rows_view(batch.bits, unit.span)[unit.other][(slice(None),) + rows[0]])
        return [kept]
    kept, offset = [], 0
    for r, k in enumerate(unit.rows):
        if cut[r]:
            kept.append(batch.box_scratch(batch.box_space[offset:], 1, rows[r])[0])
            np.copyto(kept[-1], batch.bits[unit.partners[r]][rows[r]])
            offset += kept[-1].size
    return kept


def _paste(batch: _Batch, unit: Unit, cut: list[bool], kept: list) -> None:
    if len(kept) == 1 and len(unit.rows) > 1 and all(cut) and kept[0].ndim == 4:
        box = batch.box[unit.rows[0]]
        np.copyto(_rows_view(batch.bits, unit.span)[unit.own][(slice(None),) + box], kept[0])
        return
    cut_rows = [k for k, c in zip(unit.rows, cut) if c]
    for k, box in zip(cut_rows, kept):
        np.copyto(batch.bits[k][batch.box[k]], box if box.ndim == 3 else box[0])


def _blend(batch: _Batch, unit: Unit, blend: list[bool]) -> None:
    """fl(fl(x * w) + fl(partner * w1)) for the unit's blending rows, from its loaded span."""
    span = batch.load(unit.span)
    own = span[unit.own]
    if batch.shared:   # (2, 1) arrays, not scalars: numpy is slow on strided rows with an in-place scalar
        w, w1 = batch.shared[0][:len(unit.rows)], batch.shared[1][:len(unit.rows)]
    else:
        w, w1 = _rows_view(batch.w, unit.span)[unit.own], _rows_view(batch.w1, unit.span)[unit.own]
    if unit.other is None:
        terms = batch.kept_term
    else:
        terms = batch.terms[:len(unit.rows)]
        np.multiply(span[unit.other], w1, out=terms)
    which = [r for r, b in enumerate(blend) if b]
    if len(which) == len(unit.rows):
        np.multiply(own, w, out=own)
        np.add(own, terms, out=own)
    else:
        for r in which:
            np.multiply(own[r], w[r], out=own[r])
            np.add(own[r], terms[r], out=own[r])
    batch.store(unit, which, own)
