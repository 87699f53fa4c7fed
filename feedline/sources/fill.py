"""The one sample path of the CPU engine: read -> check -> decode the crop (a grid store's
spliced MCUs, resized and flipped) -> substitute by the rule -> draw and apply the
per-sample transforms -> pixels (or the normalized row) into the Slot's memory.

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
from ..errors import UnavailableError
from .rows import RowWriter
from .substitute import first_substitute

IDLE = -1         # the record a worker holds when it holds none


@dataclass(frozen=True)
class SampleSpec:
    """What every worker is given once, when it starts: the reader, the decoder and the
    per-sample transforms, fixed for the loader's life."""

    store: object                 # the Store, or its file's name for a spawned worker when it does not pickle
    decoder: object               # the per-image Decoder, or its registered name (then built by the worker)
    transforms: object            # SampleTransforms run on the host per sample, or None
    seed: int
    substitute: bool              # on_error="substitute": a bad record is replaced by the rule's first good one


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
    boxes: np.ndarray             # int64 crops (top, left, height, width)
    flips: np.ndarray             # bool


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


def fill_chunk(chunk: Chunk, spec: SampleSpec, run: RunSpec, rows: RowWriter, control: Control) -> ChunkDone:
    """Every row of ``chunk`` into ``rows``; a bad record substituted by the rule, or the
    failure that stops the chunk."""
    store, decoder, t = spec.store, spec.decoder, spec.transforms
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
            decoder.decode_into(data, Box(*chunk.boxes[i].tolist()), bool(chunk.flips[i]), out)
            times[0], times[1] = times[0] + t1 - t0, times[1] + time.perf_counter() - t1
        except Exception as exc:
            found = None
            if spec.substitute and not isinstance(exc, UnavailableError):   # unreachable data is no record's fault
                found = first_substitute(run.augment, spec.seed, run.epoch, index, store.sizes,
                                         lambda other, box, flip: decoder.decode_into(
                                             store.read_checked(other), Box(*box), flip, out))
            if found is None:
                return done(Failure(j, exc, bad_record=True))
            other, box, flip, _ = found
            substituted.append(Substituted(j, exc, other, box, flip))
        t2 = time.perf_counter()
        if drawn is not None:
            try:
                out = t.apply_drawn(out, drawn, i, spec.seed, run.epoch, index)
            except Exception as exc:   # a user's transform failed: the consumer raises it
                return done(Failure(j, exc, bad_record=False))
        rows.write(j, out)
        times[2] += time.perf_counter() - t2
    return done()
