"""The one sample path of the CPU engine: read -> check -> decode the crop (a grid store's
spliced MCUs, resized and flipped) -> the mask, if the store has masks, through the same crop
and flip (nearest) -> substitute by the rule (its own pixels and mask) -> draw and apply the
per-sample transforms (the geometric ones to the mask too) -> pixels (or the normalized row)
and mask into the Slot's memory.

A worker runs it, whether the worker is a thread of the consumer's process or a process
of its own (workers.py): the runner changes, the path does not. It is given its fixed
setup once (SampleSpec), the epoch once per run (RunSpec) and then only chunks of plans
(indices, crops, flips). It answers each chunk with the facts of what it did (ChunkDone):
the substitutes it delivered and the error that stopped it, decided here, once; the
consumer records them (dispatch.py) and never decides them again.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..decoders.base import Box
from ..core.errors import UnavailableError
from ..dataset.mask_codec import read_png
from ..dataset.mask_sampling import sample_mask
from .rows import RowWriter
from .substitute import first_substitute

IDLE = -1         # the record a worker holds when it holds none


@dataclass(frozen=True)
class MaskSpec:
    """How a worker makes a record's mask: the store's masks are ``png`` files (an image folder
    read as it is) or stored (`feedline.dataset.mask_codec`); ``ignore_index`` where no source pixel is."""

    png: bool
    ignore_index: int


@dataclass(frozen=True)
class SampleSpec:
    """What every worker is given once, when it starts: the reader, the decoder and the
    per-sample transforms, fixed for the loader's life."""

    store: object                 # the Store, or its file's name for a spawned worker when it does not pickle
    decoder: object               # the per-image Decoder, or its registered name (then built by the worker)
    transforms: object            # SampleTransforms run on the host per sample, or None
    seed: int
    substitute: bool              # on_error="substitute": a bad record is replaced by the rule's first good one
    mask: MaskSpec | None = None  # the store's masks: made beside each sample's pixels


@dataclass(frozen=True)
class RunSpec:
    """What a run (one epoch from one start) fixes for every chunk of it."""

    generation: int               # the run's number: a worker skips chunks of older runs
    epoch: int
    augment: object               # the epoch's AugmentSpec: a substitute's own crop and flip


@dataclass(frozen=True)
class Chunk:
    """Rows ``first ..`` of a planned batch, for one worker, to write into arena ``arena``."""

    ticket: int
    generation: int
    arena: int
    first: int
    indices: np.ndarray           # int64 records
    boxes: np.ndarray             # crops (top, left, height, width): int64, float64 for evaluation crops
    flips: np.ndarray             # bool

    def __reduce__(self):
        # Sent as raw bytes: a third of the time of pickling three arrays, paid in the training process
        indices, flips = self.indices.astype(np.int64, copy=False), self.flips.astype(bool, copy=False)
        return _chunk, (self.ticket, self.generation, self.arena, self.first, indices.tobytes(),
                        self.boxes.tobytes(), self.boxes.dtype.str, flips.tobytes())


def _chunk(ticket: int, generation: int, arena: int, first: int, indices: bytes, boxes: bytes, kind: str,
           flips: bytes) -> Chunk:
    return Chunk(ticket, generation, arena, first, np.frombuffer(indices, np.int64),
                 np.frombuffer(boxes, kind).reshape(-1, 4), np.frombuffer(flips, bool))


@dataclass(frozen=True)
class Substituted:
    """Row ``row`` holds record ``index`` (its own crop ``box`` and ``flip``) in place of a bad record."""

    row: int
    error: BaseException          # why the planned record is bad
    index: int
    box: tuple[int, int, int, int]
    flip: bool


@dataclass(frozen=True)
class Failure:
    """Row ``row`` could not be made: a bad record the rule could not replace (``bad_record``),
    or something else (a transform that failed, data that cannot be reached)."""

    row: int
    error: BaseException
    bad_record: bool


@dataclass(frozen=True)
class ChunkDone:
    ticket: int
    read_s: float = 0.0
    decode_s: float = 0.0
    write_s: float = 0.0
    substituted: tuple[Substituted, ...] = ()
    failure: Failure | None = None


@dataclass(frozen=True)
class Synced:
    """A worker's answer to ("sync", token): every message sent before the sync was handled."""

    token: int


class Control:
    """The numbers a worker shares with the consumer: [0] the current run's generation (a
    chunk of another is skipped), [1 + k] the record worker k holds (IDLE between records)."""

    def __init__(self, array: np.ndarray, number: int):
        self.array, self.held = array, array[1 + number:2 + number]

    def current(self, generation: int) -> bool:
        return int(self.array[0]) == generation


def make_mask(store, spec: MaskSpec, index: int, box: Box, flip: bool, out: np.ndarray) -> None:
    """Record ``index``'s mask through ``box`` and ``flip`` into ``out`` (its checksum checked)."""
    data = store.read_mask_checked(index)
    source = read_png(data, f"{store.filename}: record {index} ({store.path(index)})'s mask") if spec.png else data
    sample_mask(source, box, flip, out, spec.ignore_index, store.size(index))


def fill_chunk(chunk: Chunk, spec: SampleSpec, run: RunSpec, rows: RowWriter, control: Control) -> ChunkDone:
    """Every row of ``chunk`` into ``rows``; a bad record substituted by the rule, or the
    failure that stops the chunk."""
    store, decoder, t, masks = spec.store, spec.decoder, spec.transforms, spec.mask

    def sample(index: int, box: Box, flip: bool, out: np.ndarray, j: int) -> None:   # a substitute's
        decoder.decode_into(store.read_checked(index), box, flip, out)
        if masks is not None:
            make_mask(store, masks, index, box, flip, rows.mask(j))

    drawn = t.draw(spec.seed, run.epoch, chunk.indices) if t is not None else None
    times = [0.0, 0.0, 0.0]   # read, decode, write
    substituted = []

    def done(failure: Failure | None = None) -> ChunkDone:
        control.held[0] = IDLE
        return ChunkDone(chunk.ticket, *times, tuple(substituted), failure)

    for i, index in enumerate(chunk.indices.tolist()):
        if not control.current(chunk.generation):     # the run was abandoned: the rest is nobody's
            break
        control.held[0] = index
        j = chunk.first + i
        out = rows.buffer(j)
        t0 = time.perf_counter()
        try:
            data = store.read_checked(index)
            t1 = time.perf_counter()
            box, flip = Box(*chunk.boxes[i].tolist()), bool(chunk.flips[i])
            decoder.decode_into(data, box, flip, out)
            if masks is not None:
                make_mask(store, masks, index, box, flip, rows.mask(j))
            times[0], times[1] = times[0] + t1 - t0, times[1] + time.perf_counter() - t1
        except Exception as exc:
            found = None
            if spec.substitute and not isinstance(exc, UnavailableError):   # unreachable data is no record's fault
                found = first_substitute(run.augment, spec.seed, run.epoch, index, store.sizes,
                                         lambda other, box, flip: sample(other, Box(*box), flip, out, j))
            if found is None:
                return done(Failure(j, exc, bad_record=True))
            other, box, flip, _ = found
            substituted.append(Substituted(j, exc, other, box, flip))
        t2 = time.perf_counter()
        if drawn is not None:
            try:
                out = t.apply_drawn(out, drawn, i, spec.seed, run.epoch, index)
                if masks is not None:   # the same drawn parameters: geometry follows, erasing leaves ignore_index
                    mask = rows.mask(j)
                    moved = t.apply_drawn_to_mask(mask, drawn, i, masks.ignore_index)
                    if moved is not mask:
                        np.copyto(mask, moved)
            except Exception as exc:   # a user's transform failed: the consumer raises it
                return done(Failure(j, exc, bad_record=False))
        rows.write(j, out)
        times[2] += time.perf_counter() - t2
    return done()
