"""What a run says when it cannot go on because of something outside it: another rank or
node that died or hangs, or a SIGTERM (torchrun stopping the survivors of a failed worker,
or a job scheduler). Each becomes one TrainError line that names the rank, where the run
stood, the checkpoint to continue from, and what to do.
"""
from __future__ import annotations

import contextlib
import re
import signal
import threading

import torch.distributed as dist

from .config import TrainError
from .distributed import DistInfo

# Words of the errors gloo and NCCL raise (as plain RuntimeErrors) when a peer is gone or silent.
_PEER_LOST = ("third_party/gloo", "Connection closed by peer", "Connection reset by peer",
              "Timed out waiting", "NCCL", "Watchdog caught collective")


class Terminated(BaseException):
    """SIGTERM arrived. A BaseException, like KeyboardInterrupt, so that no ``except
    Exception`` on the way swallows it."""


@contextlib.contextmanager
def sigterm_raises():
    """While inside, SIGTERM raises Terminated in the main thread (so the run can close its
    loaders and say where it stood), unless the program already handles SIGTERM itself."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return

    def handler(signum, frame):
        raise Terminated(signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


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


def _resume_hint(checkpoint: str, saved: tuple[int, int] | None) -> str:
    if saved is None:
        return (f"no checkpoint was saved by this run yet ({checkpoint} is written after each epoch, "
                "and every --save-every steps)")
    epoch, step = saved
    return (f"the last checkpoint, {checkpoint} (epoch {epoch + 1}, step {step}), is whole: run the same "
            "command again with --resume to continue from it")


def peer_lost(exc: BaseException, info: DistInfo, where: str, timeout_s: float, checkpoint: str,
              saved: tuple[int, int] | None) -> TrainError:
    return TrainError(f"rank {info.rank} of {info.world_size} lost the other ranks at {where}: {_gist(exc)}. "
                      f"Another rank or node died, or did not answer for --timeout {timeout_s:g} s "
                      f"(see the first error in the job's logs); {_resume_hint(checkpoint, saved)}")


def terminated(info: DistInfo, where: str, checkpoint: str, saved: tuple[int, int] | None) -> TrainError:
    who = f"rank {info.rank} of {info.world_size}" if info.distributed else "the run"
    why = ("torchrun stops every worker when one fails: its report names the rank that failed first; "
           "or a job scheduler stopped the job" if info.distributed else "a job scheduler or a user stopped it")
    return TrainError(f"{who} stopped by SIGTERM at {where} ({why}); {_resume_hint(checkpoint, saved)}")
