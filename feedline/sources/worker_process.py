"""A worker process's life around the one worker loop (worker_loop.py): what it does first
(signals, its parent's death, the descriptors it must not keep), how a message travels
(its socket), and how an answer crosses into the consumer (pickled; an exception with its
type and the worker's traceback, or a stand-in naming its type when it cannot be rebuilt).

It imports numpy, the store and the decoder (and whatever a user's transform needs); no
torch of its own.
"""
from __future__ import annotations

import ctypes
import faulthandler
import os
import pickle
import signal
import traceback
from dataclasses import replace

import numpy as np

from ..core.errors import WorkerRaised
from .arena import SharedFd, attach
from .fill import ChunkDone, Control, Failure, SampleSpec
from .worker_loop import serve

_PR_SET_PDEATHSIG = 1


def process_main(number: int, conn, spec: SampleSpec, control: SharedFd, stack: SharedFd, workers: int,
                 parent: int, inherited=()) -> None:
    """Worker ``number``'s whole life. ``control``: the int64 array it shares with the
    consumer; ``stack``: the file its Python stack goes to on SIGUSR1 (a stall report);
    ``parent``: the consumer's pid; ``inherited``: the descriptors a forked worker closes."""
    die_with_parent(parent)
    # Ctrl-C is the consumer's to handle: it stops its workers. SIGTERM ends a worker
    # quietly (not the trainer's handler, inherited over fork).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for fd in inherited:   # the consumer's ends of the sockets (its own too: the consumer's death closes it) ...
        try:
            os.close(fd)
        except OSError:
            pass
    stack_file = os.fdopen(stack.fd, "w")
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
    one_thread_each()
    array = np.frombuffer(attach(control.fd, 8 * (workers + 1)), dtype=np.int64)
    serve(PipeInbox(conn), opened(spec), Control(array, number))


def die_with_parent(parent: int) -> None:
    """Ask the kernel for SIGKILL when the thread that started this process ends (its
    process killed, however); and end now if that already happened."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):   # not Linux: the socket's end still ends the worker
        pass
    if os.getppid() != parent:
        os._exit(0)


def one_thread_each() -> None:
    """A worker is one core's worth of work: torch (imported by a user's transform, or
    inherited over fork) runs its operators on the worker's own thread, as in DataLoader's
    workers; a forked child's copy of the parent's OpenMP pool would otherwise stall it.
    (OpenCV's pool is left alone: resetting it in a forked child can deadlock.)"""
    import sys
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def opened(spec: SampleSpec) -> SampleSpec:
    """``spec`` with its store opened and its decoder built, where they came by name."""
    store, decoder = spec.store, spec.decoder
    if isinstance(store, str):
        from ..stores import open_dataset
        store = open_dataset(store)
    if isinstance(decoder, str):
        from ..decoders.selection import per_image_decoder
        decoder = per_image_decoder(decoder, store)
    return replace(spec, store=store, decoder=decoder)


class PipeInbox:
    """A worker process's socket to the consumer."""

    def __init__(self, conn):
        self.conn = conn

    def receive(self):
        try:
            return self.conn.recv()
        except (EOFError, OSError):   # the consumer is gone
            return None

    def answer(self, answer) -> None:
        if isinstance(answer, ChunkDone) and (answer.substituted or answer.failure):
            answer = crossing(answer)
        self.conn.send_bytes(pickle.dumps(answer))

    def memory(self, message):
        from multiprocessing.reduction import recv_handle
        return attach(recv_handle(self.conn), message[2].nbytes)


def crossing(done: ChunkDone) -> ChunkDone:
    """``done`` with each error as it will arrive in the consumer: with the worker's
    traceback as a note, and rebuilt as a stand-in where it would not unpickle as itself."""
    failure = done.failure and Failure(done.failure.row, portable_error(done.failure.error), done.failure.bad_record)
    substituted = tuple(replace(s, error=portable_error(s.error)) for s in done.substituted)
    return replace(done, substituted=substituted, failure=failure)


def portable_error(error: BaseException) -> BaseException:
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        same = type(pickle.loads(pickle.dumps(error))) is type(error)
    except Exception:
        same = False
    if not same:
        error = WorkerRaised(f"{type(error).__module__}.{type(error).__qualname__}: {error}",
                             type_name=f"{type(error).__module__}.{type(error).__qualname__}")
    if hasattr(error, "add_note"):
        error.add_note(f"the worker's traceback:\n{text.rstrip()}")
    return error

