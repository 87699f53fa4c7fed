"""The worker processes of one loader: started once, with the loader, and stopped and joined
by ``close()`` (or at exit); nothing is started per epoch.

Each worker has one socket to the consumer: chunks of plans and arena descriptors go in,
a small ChunkDone comes back per chunk. The consumer waits on the sockets and on the
workers' sentinels together, so a worker that dies (SIGKILL, the OOM killer) is an error
within moments, naming the worker and the record it held (each worker writes the record
it is on into a shared int64 array), never a hang. A worker started by fork must not
inherit an initialized CUDA context: a parent that has initialized CUDA starts its
workers with spawn instead (their setup is then pickled).
"""
from __future__ import annotations

import itertools
import logging
import multiprocessing
import pickle
import signal
import sys
import time
from multiprocessing.connection import wait

import numpy as np

from ..errors import WorkerError
from .shared_rows import Arena, RowFormat, SharedFd
from .shutdown import close_at_exit
from .worker_process import IDLE, ChunkDone, Synced, WorkerSetup, serve

log = logging.getLogger(__name__)
JOIN_S = 5.0


def start_method() -> str:
    """fork (fast, nothing pickled) unless CUDA is initialized here: then spawn."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "spawn"
    return "fork"


def pickles(value) -> bool:
    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True


def portable(setup: WorkerSetup, decoder_name: str | None) -> WorkerSetup:
    """``setup`` for a spawned worker: a Store or Decoder that does not pickle goes by name
    (the store's file, the decoder's registered name) and the worker opens and builds it."""
    from dataclasses import replace
    store, decoder = setup.store, setup.decoder
    if not pickles(store):
        store = str(store.filename)
    if not pickles(decoder):
        if decoder_name is None:
            raise TypeError(f"the decoder {decoder!r} does not pickle, so spawned workers (CUDA is initialized "
                            "in this process) cannot have it: pass a registered decoder name, or make the "
                            "loader before initializing CUDA")
        decoder = decoder_name
    return replace(setup, store=store, decoder=decoder)


def holding(pool: "WorkerPool", k: int) -> str:
    """The record worker ``k`` of ``pool`` is on, as the shared control array says."""
    held = int(pool.control[1 + k])
    store = pool.setup.store
    if held == IDLE:
        return "between records"
    return f"while it held record {held} ({store.path(held)}) of {store.filename}"


def death_report(k: int, pid: int, code: int | None, record: str) -> WorkerError:
    """What a user needs to know of worker ``k``'s end: how, on which ``record``, and what to do."""
    how = (f"killed by {signal.Signals(-code).name}" if code is not None and code < 0
           else f"exited with code {code}")
    hint = " (SIGKILL is what the OOM killer sends: lower num_workers or batch_size)" if code == -9 else ""
    error = WorkerError(f"feedline worker {k} (pid {pid}) {how} {record}{hint}. The loader cannot go on: "
                        "make a new FeedLoader")
    error.signum = -code if code is not None and code < 0 else None
    return error


def start_workers(context, setup: WorkerSetup, control: SharedFd, pool: "WorkerPool") -> None:
    """``pool.count`` workers started, each with its end of a socket; the consumer's ends and
    the processes go into ``pool.conns`` and ``pool.procs`` as they start."""
    inherited = []   # the consumer's ends so far: a forked worker closes its copies
    for k in range(pool.count):
        here, there = context.Pipe(duplex=True)
        proc = context.Process(target=serve, name=f"feedline-worker-{k}", daemon=True,
                               args=(k, there, setup, control, pool.count,
                                     tuple(inherited) if context.get_start_method() == "fork" else ()))
        proc.start()
        there.close()
        pool.conns.append(here)
        pool.procs.append(proc)
        inherited.append(here.fileno())


class WorkerPool:
    """``count`` worker processes serving ``setup``. Not thread-safe: one consumer drives it."""

    def __init__(self, setup: WorkerSetup, count: int, decoder_name: str | None = None):
        """``decoder_name``: what a spawned worker builds when the Decoder does not pickle."""
        method = start_method()
        self.setup, self.count = setup, count
        if method != "fork":
            setup = portable(setup, decoder_name)
        self._control = Arena(8 * (count + 1), "feedline-control")
        self.control = np.frombuffer(self._control.memory, dtype=np.int64)
        self.control[0], self.control[1:] = 0, IDLE
        self.error: WorkerError | None = None
        self._closed = False
        self._tokens = itertools.count()
        self.conns, self.procs = [], []
        try:
            if method == "fork":   # spawned workers open the store themselves, by name
                setup.store.before_fork()
            start_workers(multiprocessing.get_context(method), setup, SharedFd(self._control.fd), self)
        except BaseException:
            self.close()
            raise
        self._control.release_fd()
        close_at_exit(self)

    @property
    def running(self) -> bool:
        """Whether the workers are there to be driven (not closed, none dead)."""
        return self.error is None and not self._closed

    @property
    def generation(self) -> int:
        return int(self.control[0])

    def new_generation(self) -> int:
        """A new run: chunks of the runs before it are skipped by the workers."""
        self.control[0] += 1
        return int(self.control[0])

    def give_arena(self, number: int, fmt: RowFormat, arena: Arena) -> None:
        """Every worker maps ``arena`` as arena ``number``; the descriptor is closed here after."""
        from multiprocessing.reduction import send_handle
        self._check()
        try:
            for conn, proc in zip(self.conns, self.procs):
                conn.send(("arena", number, fmt))
                send_handle(conn, arena.fd, proc.pid)
        except OSError:
            self._check_dead()
            raise
        finally:
            arena.release_fd()

    def drop_arena(self, number: int) -> None:
        if self.error is None and not self._closed:
            for conn in self.conns:
                try:
                    conn.send(("drop", number))
                except OSError:
                    pass   # a dead worker is reported where the consumer waits on it

    def send(self, k: int, message) -> None:
        self._check()
        try:
            self.conns[k].send(message)
        except OSError:
            self._check_dead()
            raise

    def results(self, timeout: float | None) -> list[tuple[int, ChunkDone]]:
        """The answers that arrived within ``timeout`` (None: wait for at least one). Raises a
        WorkerError when a worker died."""
        self._check()
        index = {c: k for k, c in enumerate(self.conns)}
        sentinels = {p.sentinel: k for k, p in enumerate(self.procs)}
        ready = wait([*self.conns, *sentinels], timeout)
        answers = []
        for r in ready:
            if r in index:
                try:
                    answers.append((index[r], pickle.loads(r.recv_bytes())))
                except (EOFError, OSError):
                    self._died(index[r])
        for r in ready:
            if r in sentinels and not answers:
                self._died(sentinels[r])
        return answers

    def sync(self, timeout_s: float) -> None:
        """Return once every worker has answered every message sent before this call (their
        answers are dropped); a TimeoutError when one has not within ``timeout_s``."""
        token = next(self._tokens)
        for k in range(self.count):
            self.send(k, ("sync", token))
        waiting, deadline = set(range(self.count)), time.monotonic() + timeout_s
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"feedline workers {sorted(waiting)} did not finish their sample within "
                                   f"{timeout_s:g} s of the run's end: they are stopped")
            for k, answer in self.results(left):
                if isinstance(answer, Synced) and answer.token == token:
                    waiting.discard(k)

    def _check(self) -> None:
        if self.error is not None:
            raise self.error
        if self._closed:
            raise RuntimeError("the loader's workers were stopped: the loader was closed")

    def _check_dead(self) -> None:
        for k, proc in enumerate(self.procs):
            if not proc.is_alive():
                self._died(k)

    def _died(self, k: int):
        proc = self.procs[k]
        proc.join(0.5)
        self.error = death_report(k, proc.pid, proc.exitcode, holding(self, k))
        self.close(kill=True)   # the batches in flight are lost anyway: no waiting on the others
        raise self.error

    def close(self, kill: bool = False) -> None:
        """Stop every worker and join it (killed after JOIN_S if it does not stop; at once with
        ``kill``). A close cut short (Ctrl-C) is finished by the next call."""
        if not self._closed:
            self._closed = True
            self.control[0] += 1
            for conn in self.conns:
                try:
                    conn.send(("stop",))
                except OSError:
                    pass
        while self.procs:
            proc = self.procs[-1]
            if kill and proc.is_alive():
                proc.kill()
            proc.join(JOIN_S)
            if proc.is_alive():
                log.warning("feedline worker %s did not stop within %.0f s: killed", proc.name, JOIN_S)
                proc.kill()
                proc.join()
            proc.close()
            self.procs.pop()
        while self.conns:
            self.conns.pop().close()
