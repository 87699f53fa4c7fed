"""The body of one worker process: read -> (grid: splice) -> decode -> resize, flip ->
per-sample transforms -> pixels (or normalized rows) straight into a shared Slot.

A worker is a process of its own, with its own GIL: it lives as long as its loader
(across epochs), takes chunks of batch plans from its socket, writes their samples into
the arenas (shared_rows.py) and answers with what it did (the chunk's ticket, and a bad
record's error or substitute). It never plans, never allocates batch memory and never
sees the ledger: the consumer keeps those. It imports numpy, the store and the decoder
(and whatever a user's transform needs); no torch of its own.

It ends when told to, when its socket closes, or when its parent is gone (checked every
second), so a killed training process leaves no worker behind.
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

import numpy as np

from ..decoders.base import Box
from .shared_rows import RowFormat, RowWriter, SharedFd, attach

PARENT_CHECK_S = 1.0
IDLE = -1         # the record a worker holds when it holds none


@dataclass(frozen=True)
class WorkerSetup:
    """What every worker is given once, when it starts."""

    store: object                 # the Store (fork-safe: it reopens its handles in the child), or
                                  # its file's name for a spawned worker when the Store does not pickle
    decoder: object               # the per-image Decoder, or its registered name (then built here)
    sample_transforms: object     # SampleTransforms run on the host per sample, or None
    seed: int
    substitute: bool              # on_error="substitute": try the rule's records for a bad one
    parent: int                   # the consumer's pid: the worker ends when it is gone


@dataclass(frozen=True)
class Chunk:
    """Rows ``first ..`` of a planned batch, for one worker, to write into arena ``arena``."""

    ticket: int
    generation: int               # the run it belongs to: a newer run skips what is left of it
    arena: int
    first: int
    epoch: int
    indices: np.ndarray
    boxes: np.ndarray
    flips: np.ndarray
    spec: object                  # the epoch's AugmentSpec: a substitute's own crop and flip


@dataclass(frozen=True)
class Synced:
    """A worker's answer to ("sync", token): every chunk sent before the sync was answered."""

    token: int


@dataclass(frozen=True)
class ChunkDone:
    ticket: int
    read_s: float
    decode_s: float
    substitutes: tuple = ()       # (row, error, the substitute record delivered in its place)
    error: tuple | None = None    # (row, error, bad record): a bad record none could replace, or
                                  # a transform that failed on a good one


def serve(number: int, conn, setup: WorkerSetup, control: SharedFd, workers: int, inherited=()) -> None:
    """The worker's loop until it is told to stop or its parent is gone. ``control``: int64
    shared with the parent: [0] the current run, [1 + number] the record this worker holds."""
    # Ctrl-C is the consumer's to handle: it stops its workers, or they see it gone within a
    # second. SIGTERM ends a worker quietly (not the trainer's handler, inherited over fork).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for fd in inherited:   # the other workers' parent-side sockets, copied by fork: their EOF is theirs
        try:
            os.close(fd)
        except OSError:
            pass
    one_thread_each()
    setup = opened(setup)
    control = np.frombuffer(attach(control.fd, 8 * (workers + 1)), dtype=np.int64)
    arenas: dict[int, RowWriter] = {}
    held = control[1 + number:2 + number]
    while True:
        if not conn.poll(PARENT_CHECK_S):
            if os.getppid() != setup.parent:
                return
            continue
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        kind = message[0]
        if kind == "fill":
            send(conn, fill(message[1], setup, arenas[message[1].arena], held, control))
        elif kind == "arena":
            from multiprocessing.reduction import recv_handle
            fmt: RowFormat = message[2]
            arenas[message[1]] = RowWriter(fmt, attach(recv_handle(conn), fmt.nbytes))
        elif kind == "drop":
            arenas.pop(message[1], None)
        elif kind == "sync":
            send(conn, Synced(message[1]))
        elif kind == "stop":
            return


def one_thread_each() -> None:
    """A worker is one core's worth of work: torch (imported by a user's transform, or
    inherited over fork) runs its operators on the worker's own thread, as in DataLoader's
    workers; a forked child's copy of the parent's OpenMP pool would otherwise stall it.
    (OpenCV's pool is left alone: resetting it in a forked child can deadlock.)"""
    import sys
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def opened(setup: WorkerSetup) -> WorkerSetup:
    """``setup`` with its store opened and its decoder built, where they came by name."""
    from dataclasses import replace
    store, decoder = setup.store, setup.decoder
    if isinstance(store, str):
        from ..stores import open_dataset
        store = open_dataset(store)
    if isinstance(decoder, str):
        from ..selection import thread_decoder
        decoder = thread_decoder(decoder, store)
    return replace(setup, store=store, decoder=decoder)


def send(conn, done: ChunkDone | Synced) -> None:
    """``done`` to the consumer; an error that does not pickle goes as its type and message."""
    import pickle
    try:
        payload = pickle.dumps(done)
    except Exception:
        def plain(exc):
            return RuntimeError(f"{type(exc).__name__}: {exc}")
        error = done.error and (done.error[0], plain(done.error[1]), done.error[2])
        done = ChunkDone(done.ticket, done.read_s, done.decode_s,
                         tuple((j, plain(e), s) for j, e, s in done.substitutes), error)
        payload = pickle.dumps(done)
    conn.send_bytes(payload)


def fill(chunk: Chunk, setup: WorkerSetup, rows: RowWriter, held: np.ndarray, control: np.ndarray) -> ChunkDone:
    """Every row of ``chunk`` into ``rows``; a bad record substituted by the rule, or reported."""
    store, decoder, t = setup.store, setup.decoder, setup.sample_transforms
    drawn = t.draw(setup.seed, chunk.epoch, chunk.indices) if t is not None else None
    read_s = decode_s = 0.0
    substitutes = []
    for i, index in enumerate(chunk.indices.tolist()):
        if control[0] != chunk.generation:     # the run was abandoned: the rest is nobody's
            break
        held[0] = index
        j = chunk.first + i
        out = rows.buffer(j, drawn is not None)
        t0 = time.perf_counter()
        try:
            data = store.read_checked(index)
            t1 = time.perf_counter()
            decoder.decode_into(data, Box(*chunk.boxes[i].tolist()), bool(chunk.flips[i]), out)
            read_s, decode_s = read_s + t1 - t0, decode_s + time.perf_counter() - t1
        except Exception as exc:
            sub = _substitute(chunk, index, setup, out) if setup.substitute else None
            if sub is None:
                held[0] = IDLE
                return ChunkDone(chunk.ticket, read_s, decode_s, tuple(substitutes), (j, exc, True))
            substitutes.append((j, exc, sub))
        if drawn is not None:
            try:
                out = t.apply_drawn(out, drawn, i, setup.seed, chunk.epoch, index)
            except Exception as exc:   # a user's transform failed: the consumer raises it
                held[0] = IDLE
                return ChunkDone(chunk.ticket, read_s, decode_s, tuple(substitutes), (j, exc, False))
        rows.write(j, out)
    held[0] = IDLE
    return ChunkDone(chunk.ticket, read_s, decode_s, tuple(substitutes))


def _substitute(chunk: Chunk, index: int, setup: WorkerSetup, out: np.ndarray) -> int | None:
    """The first record of the substitute rule that decodes, decoded into ``out`` with its own
    crop and flip; None when none does."""
    from .substitute import MAX_ATTEMPTS, substitute_sample
    store = setup.store
    for attempt in range(MAX_ATTEMPTS):
        other, box, flip = substitute_sample(chunk.spec, setup.seed, chunk.epoch, index, attempt, store.sizes)
        try:
            setup.decoder.decode_into(store.read_checked(other), Box(*np.asarray(box).tolist()), flip, out)
        except Exception:
            continue
        return other
    return None
