"""What a run says when it cannot go on because of something outside it: another rank or
node that died or hangs, or a SIGTERM (torchrun stopping the survivors of a failed worker,
or a job scheduler). Each becomes one TrainError line that names the rank, where the run
stood, the checkpoint to continue from, and what to do; an interrupt (Ctrl-C) logs the same.
"""
from __future__ import annotations

import contextlib
import re
import signal
import threading
from typing import Callable

import torch.distributed as dist

from ..core.errors import WorkerError
from .config import TrainError
from .distributed import DistInfo

# Words of the errors gloo and NCCL raise (as plain RuntimeErrors) when a peer is gone or silent.
_PEER_LOST = ("third_party/gloo", "Connection closed by peer", "Connection reset by peer",
              "Timed out waiting", "Application timeout caused pair closure", "NCCL",
              "Watchdog caught collective")


class Terminated(BaseException):
    """SIGTERM arrived. A BaseException, like KeyboardInterrupt, so that no ``except
    Exception`` on the way swallows it."""


class _Sigterm:
    """The SIGTERM handler and whether it may interrupt now; process-wide, as signals are."""

    def __init__(self):
        self.quiet = False

    def handler(self, signum, frame):
        if not self.quiet:
            raise Terminated(signum)


_SIGTERM = _Sigterm()


@contextlib.contextmanager
def sigterm_raises():
    """While inside, SIGTERM raises Terminated in the main thread (so the run can close its
    loaders and say where it stood), unless the program already handles SIGTERM itself."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return
    signal.signal(signal.SIGTERM, _SIGTERM.handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def sigterm_ignored():
    """While inside, SIGTERM does not interrupt: for a run that is already ending (closing its
    loaders after an error), whose first error is the one to report. torchrun sends SIGTERM
    to every worker once one fails, often just then."""
    before, _SIGTERM.quiet = _SIGTERM.quiet, True
    try:
        yield
    finally:
        _SIGTERM.quiet = before


def is_peer_failure(exc: BaseException, info: DistInfo) -> bool:
    """True when ``exc`` is a collective that failed because another rank died or stopped
    answering (a closed connection, a timeout), not a bug of this rank."""
    if not info.distributed:
        return False
    if isinstance(exc, dist.DistError):
        return True
    return isinstance(exc, RuntimeError) and any(word in str(exc) for word in _PEER_LOST)


def _gist(exc: BaseException) -> str:
    """The first sentence of a gloo/NCCL message, without its source location."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = re.sub(r"^\[[^\]]*\]\s*", "", text)
    return text.split(". This is typically")[0].rstrip(". ")


@contextlib.contextmanager
def explained(info: DistInfo, timeout_s: float, where: Callable[[], str], resume_hint: Callable[[], str],
              say: Callable[..., None] = lambda *args: None):
    """Turns, inside, SIGTERM and a collective that lost its peers into one TrainError line
    each, which says where the run stood (``where()``) and what to continue from
    (``resume_hint()``); an interrupt (Ctrl-C) goes on once ``say`` has logged the same (the
    command line then ends with its own "interrupted"). Any other error passes unchanged."""
    error = None
    try:
        yield
    except KeyboardInterrupt:
        say("interrupted at %s; %s", where(), resume_hint())
        raise
    except Terminated:
        with sigterm_ignored():
            error = terminated(info, where(), resume_hint())
    except WorkerError as exc:   # torchrun and schedulers signal the whole tree, the workers often first
        if exc.signum != signal.SIGTERM:
            raise
        with sigterm_ignored():
            error = terminated(info, where(), resume_hint())
    except Exception as exc:
        with sigterm_ignored():
            if not is_peer_failure(exc, info):
                raise
            error = peer_lost(exc, info, where(), timeout_s, resume_hint())
    # Raised here, outside the handler, so that the error does not keep the failed one (and
    # through its traceback the DDP model) alive while the process group is torn down.
    if error is not None:
        with sigterm_ignored():
            raise error


def peer_lost(exc: BaseException, info: DistInfo, where: str, timeout_s: float, resume_hint: str) -> TrainError:
    return TrainError(f"rank {info.rank} of {info.world_size} lost the other ranks at {where}: {_gist(exc)}. "
                      f"Another rank or node died, or did not answer for --timeout {timeout_s:g} s "
                      f"(see the first error in the job's logs); {resume_hint}")


def terminated(info: DistInfo, where: str, resume_hint: str) -> TrainError:
    who = f"rank {info.rank} of {info.world_size}" if info.distributed else "the run"
    why = ("torchrun stops every worker when one fails: its report names the rank that failed first; "
           "or a job scheduler stopped the job" if info.distributed else "a job scheduler or a user stopped it")
    return TrainError(f"{who} stopped by SIGTERM at {where} ({why}); {resume_hint}")

