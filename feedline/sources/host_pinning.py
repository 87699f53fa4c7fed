"""Page-locking a mapping this process shares (a worker engine's arena) for CUDA copies.

A Slot's arena is memory the workers map too, so it is pinned in place (cudaHostRegister). Its host-to-device copy
then runs asynchronously on the CUDA Finisher's side stream, at full speed, and the tensors
over it say so (``is_pinned()``). A registered range must be unregistered before it is
unmapped (CUDA would keep its pages locked), and not while any tensor over it can still be
copied: the range is unregistered exactly once, when the last tensor over it goes (the
numpy array under the tensors holds the mapping and drops it only after its finalizer ran).
"""
from __future__ import annotations

import ctypes
import logging
import os
import weakref
from typing import Callable

import numpy as np
import torch

log = logging.getLogger(__name__)


def when_unused(rows: np.ndarray, callback: Callable, *args) -> weakref.finalize:
    """``callback(*args)`` once, when the last tensor over ``rows`` goes (``torch.from_numpy``
    views hold ``rows``), while the memory ``rows`` holds is still mapped; never at exit."""
    finalizer = weakref.finalize(rows, callback, *args)
    finalizer.atexit = False   # the process's end unmaps and unpins everything at once
    return finalizer


_PORTABLE = 1   # cudaHostRegisterPortable: pinned for every device's context, not only the current one's


class HostPinning:
    """Pins one engine's arenas for copies to ``device``. After one refusal (no CUDA, a
    locked-memory limit) the engine's memory stays pageable, with one warning: slower
    copies, never an error."""

    def __init__(self, device: str | torch.device):
        self.device = torch.device(device)
        self.refused = False

    def tensor(self, memory, nbytes: int) -> torch.Tensor:
        """A flat uint8 tensor over the first ``nbytes`` of ``memory`` (a writable buffer),
        pinned for CUDA unless registration was refused."""
        rows = np.frombuffer(memory, dtype=np.uint8, count=nbytes)
        if not self.refused and nbytes > 0:
            address = rows.ctypes.data
            error = _register(address, nbytes, self.device)
            if error is None:
                when_unused(rows, _unregister, address, self.device, os.getpid())
            else:
                self.refused = True
                log.warning("cannot pin the workers' shared batch memory for CUDA (%s); it stays "
                            "pageable, so host-to-device copies are slower", error)
        return torch.from_numpy(rows)


def _register(address: int, nbytes: int, device: torch.device) -> str | None:
    """None once ``nbytes`` at ``address`` are registered with CUDA, else why not. Done on
    ``device``, so no other GPU gets a context (and its memory) for it."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return "CUDA is not available"
    cudart = torch.cuda.cudart()
    with torch.cuda.device(device):
        error = cudart.cudaHostRegister(address, nbytes, _PORTABLE)
        if int(error) == 0:
            return None
        _clear_last_error()
    return f"cudaHostRegister: error {int(error)}, {cudart.cudaGetErrorString(error)}"


def _unregister(address: int, device: torch.device, pid: int) -> None:
    if os.getpid() != pid:   # a forked child's copy of the finalizer: the registration is the parent's
        return
    try:
        with torch.cuda.device(device):
            code = int(torch.cuda.cudart().cudaHostUnregister(address))
            if code != 0:
                _clear_last_error()
    except Exception:   # at the interpreter's end torch or CUDA may be half torn down; the exit unpins
        log.debug("cannot unregister pinned host memory", exc_info=True)
        return
    if code != 0:
        log.debug("cudaHostUnregister: error %d", code)


def _clear_last_error() -> None:
    """A failed runtime call leaves CUDA's per-thread last error set, and PyTorch's next
    kernel-launch check would raise it: read it off, from the libcudart PyTorch loaded."""
    get_last_error = _cuda_get_last_error()
    if get_last_error is not None:
        get_last_error()


def _cuda_get_last_error():
    try:
        return ctypes.CDLL(None).cudaGetLastError
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libcudart" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            return ctypes.CDLL(path).cudaGetLastError
        except (OSError, AttributeError):
            continue
    return None
