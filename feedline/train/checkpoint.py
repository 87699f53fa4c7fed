"""Checkpoints written atomically: a temporary file in the same folder, fsync, os.replace.

A run killed while saving leaves the previous checkpoint whole. Loading uses
``weights_only=True``: a checkpoint from elsewhere cannot run code.
"""
from __future__ import annotations

import os

import numpy as np
import torch

from ..durable import fsync_folder
from .config import TrainError


def _write(state: dict, fh) -> None:
    """Serialize ``state`` into the open file; tests replace it to fail mid-write."""
    torch.save(state, fh)


def plain(obj):
    """``obj`` with numpy scalars and arrays turned into Python numbers and tensors, which
    ``torch.load(weights_only=True)`` accepts."""
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(plain(v) for v in obj)
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(obj))
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def save(state: dict, path: str) -> None:
    """Write ``state`` to ``path`` so that ``path`` is always either the old or the new file."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            _write(plain(state), fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_folder(folder)


def load(path: str) -> dict:
    """The checkpoint at ``path`` on the CPU; TrainError when it is missing or unreadable."""
    if not os.path.exists(path):
        raise TrainError(f"{path}: no checkpoint to resume from; run without --resume first, "
                         "or pass --resume PATH to a checkpoint.pt")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for a damaged file
        raise TrainError(f"{path}: not a readable checkpoint ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}); "
                         "delete it or pass --resume PATH to another one") from None
    if not isinstance(state, dict) or "model" not in state:
        raise TrainError(f"{path}: not a feedline training checkpoint (no model state)")
    return state
