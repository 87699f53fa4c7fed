"""Workers in processes of their own, each with its own GIL (the default engine).

Each worker has one socket to the consumer; the consumer waits on the sockets and on the
workers' sentinels together, so a worker that dies (SIGKILL, the OOM killer) is an error
within moments, naming it and the record it held (each worker writes the record it is on
into a shared int64 array), never a hang. The workers are started by fork, or by spawn
when this process has initialized CUDA (a forked child must not inherit a CUDA context;
their setup is then pickled). They are started from a thread of their own that lives as
long as they do: each worker asks the kernel to kill it when that thread's process ends
(PR_SET_PDEATHSIG), so a killed training process leaves no worker behind, whatever the
worker was doing.
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
from dataclasses import replace
from multiprocessing.connection import wait

import numpy as np

from ..core.errors import WorkerError
from .arena import Arena, SharedFd
from .fill import SampleSpec
from .fork_gate import GATE
from .rows import RowFormat
from .worker_process import process_main
from .workers import Workers

log = logging.getLogger(__name__)
JOIN_S = 5.0
STACK_S = 1.0      # how long a stalled worker has to write its stack


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


def portable(spec: SampleSpec, decoder_name: str | None) -> SampleSpec:
    """``spec`` for a spawned worker: a Store or Decoder that does not pickle goes by name
    (the store's file, the decoder's registered name) and the worker opens and builds it."""
    store, decoder = spec.store, spec.decoder
    if not pickles(store):
        store = str(store.filename)
    if not pickles(decoder):
        if decoder_name is None:
            raise TypeError(f"the decoder {decoder!r} does not pickle, so spawned workers (CUDA is initialized "
                            "in this process) cannot have it: pass a registered decoder name, or make the "
                            "loader before initializing CUDA")
        decoder = decoder_name
    return replace(spec, store=store, decoder=decoder)


def death_report(k: int, pid: int, code: int | None, record: str) -> WorkerError:
    """What a user needs to know of worker ``k``'s end: how, on which ``record``, and what to do."""
    signum = -code if code is not None and code < 0 else None
    how = f"killed by {signal.Signals(signum).name}" if signum is not None else f"exited with code {code}"
    hint = " (SIGKILL is what the OOM killer sends: lower num_workers or batch_size)" if code == -9 else ""
    return WorkerError(f"feedline worker {k} (pid {pid}) {how} {record}{hint}. The loader cannot go on: "
                       "make a new FeedLoader", signum=signum)


def end_process(proc: multiprocessing.Process, kill: bool) -> None:
    """Join ``proc``, told to stop (killed after JOIN_S if it has not; at once with ``kill``),
    and close it. What an end that a Ctrl-C cut short left undone is done."""
    try:
        if proc.pid is None:   # a close that a Ctrl-C cut short had joined it
            return
        if kill and proc.is_alive():
            proc.kill()
        proc.join(JOIN_S)
        if proc.is_alive():
            log.warning("feedline worker %s did not stop within %.0f s: killed", proc.name, JOIN_S)
            proc.kill()
            proc.join()
        proc.close()
    except ValueError:   # closed already
        pass


class _Keeper(threading.Thread):
    """The thread the workers are started from, alive until they are stopped: a worker's
    PR_SET_PDEATHSIG fires when the thread that started it ends. The consumer polls a flag
    and holds no lock the keeper must release: a Ctrl-C anywhere, even between the keeper's
    making and its start(), leaves nothing to wait for forever."""

    LAUNCH_S = 0.1   # a thread given to start() has its ident within this

    def __init__(self, start_workers):
        super().__init__(name="feedline-workers", daemon=True)
        self._start_workers, self.error = start_workers, None
        self.started = False                     # the workers are started, or failed to be (``error``)
        self.staying = threading.Lock()
        self.staying.acquire()

    def run(self) -> None:
        try:
            self._start_workers()
        except BaseException as exc:   # raised again in the consumer
            self.error = exc
        finally:
            self._start_workers = None   # holds the workers' owner: let it be collected
            self.started = True
        self.staying.acquire()

    def wait_started(self) -> None:
        """Until the workers are started; at once for a keeper that was never started."""
        unlaunched_after = time.monotonic() + self.LAUNCH_S
        while not self.started:
            if self.ident is None and time.monotonic() > unlaunched_after:
                return
            time.sleep(0.001)

    def leave(self) -> None:
        self.wait_started()   # no worker is being started any more
        if self.staying.locked():   # not released yet by a leave() that a Ctrl-C cut short
            self.staying.release()
        if self.ident is not None:
            self.join()


class ProcessWorkers(Workers):
    kind = "worker process"

    def __init__(self, spec: SampleSpec, count: int, decoder_name: str | None = None):
        """``decoder_name``: what a spawned worker builds when the Decoder does not pickle."""
        self.decoder_name = decoder_name
        self.conns, self.procs = [], []
        self._stacks: list[int] = []   # each worker's stack file (a memfd)
        self._keeper: _Keeper | None = None
        super().__init__(spec, count)

    def _control(self) -> np.ndarray:
        self._control_arena = Arena(8 * (self.count + 1), "feedline-control")
        return np.frombuffer(self._control_arena.memory, dtype=np.int64)

    def _start(self) -> None:
        method = start_method()
        spec = self.spec if method == "fork" else portable(self.spec, self.decoder_name)
        if method == "fork":
            self.spec.store.before_fork()
        self._keeper = _Keeper(lambda: self._start_each(multiprocessing.get_context(method), spec))
        self._keeper.start()
        self._keeper.wait_started()
        if self._keeper.error is not None:
            raise self._keeper.error

    def _start_each(self, context, spec: SampleSpec) -> None:
        """The workers, each with its socket end and stack file; a forked one closes its copies of ours."""
        fork = context.get_start_method() == "fork"
        control = SharedFd(self._control_arena.fd)
        for k in range(self.count):
            here, there = context.Pipe(duplex=True)
            stack = os.memfd_create(f"feedline-stack-{k}", os.MFD_CLOEXEC)
            inherited = [c.fileno() for c in self.conns] + [here.fileno()] + self._stacks + \
                [a.fd for _, a in self._arenas.values() if a.fd is not None]
            proc = context.Process(target=process_main, name=f"feedline-worker-{k}", daemon=True,
                                   args=(k, there, spec, control, SharedFd(stack), self.count, os.getpid(),
                                         tuple(inherited) if fork else ()))
            with GATE.forking():   # no worker thread of this process mid-sample (fork_gate.py)
                proc.start()
            there.close()
            self.conns.append(here)
            self.procs.append(proc)
            self._stacks.append(stack)

    def _post(self, k: int, message) -> None:
        try:
            self.conns[k].send(message)
        except OSError:
            self._check_dead()
            raise

    def _post_arena(self, k: int, number: int, fmt: RowFormat, arena: Arena) -> None:
        from multiprocessing.reduction import send_handle
        self._post(k, ("arena", number, fmt))
        try:
            send_handle(self.conns[k], arena.fd, self.procs[k].pid)
        except OSError:
            self._check_dead()
            raise

    def _receive(self, timeout: float | None) -> list[tuple[int, object]]:
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

    def _check_dead(self) -> None:
        for k, proc in enumerate(self.procs):
            if not proc.is_alive():
                self._died(k)

    def _died(self, k: int):
        proc = self.procs[k]
        proc.join(0.5)
        self.died(death_report(k, proc.pid, proc.exitcode, self.holding(k)))

    def _stop(self, kill: bool) -> None:
        """Stop every worker and join it (killed after JOIN_S if it does not stop; at once with
        ``kill``). A stop cut short (Ctrl-C) is finished by the next."""
        if self._keeper is not None:
            self._keeper.wait_started()
        for conn in self.conns:
            try:
                conn.send(("stop",))
            except OSError:
                pass
        while self.procs:
            end_process(self.procs[-1], kill)
            self.procs.pop()
        while self.conns:
            self.conns.pop().close()
        while self._stacks:
            os.close(self._stacks.pop())
        if self._keeper is not None:
            self._keeper.leave()
            self._keeper = None

    def close(self) -> None:
        super().close()
        if os.getpid() == self.owner:
            self._control_arena.close_fd()

    def name(self, k: int) -> str:
        pid = self.procs[k].pid if k < len(self.procs) else "?"
        return f"worker process {k} (pid {pid})"

    def stack(self, k: int) -> str:
        """Worker ``k``'s Python stack, which it writes into its stack file on SIGUSR1."""
        if k >= len(self.procs):
            return "(not running)"
        pid, fd = self.procs[k].pid, self._stacks[k]
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rpartition(")")[2].split()[0] in ("T", "t"):
                    return "(stopped: the process received SIGSTOP or is traced)"
        except OSError:
            return "(gone)"
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.kill(pid, signal.SIGUSR1)
        deadline, text = time.monotonic() + STACK_S, b""
        while time.monotonic() < deadline:
            time.sleep(0.05)
            now = os.pread(fd, 1 << 16, 0)
            if now and now == text:
                break
            text = now
        return text.decode(errors="replace") or "(no stack written)"
