"""Checkpoints written atomically: a temporary file in the same folder, fsync, os.replace.

A run killed while saving, or a disk that fills up, leaves the previous checkpoint whole:
the new one replaces it only once completely on disk. Loading uses ``weights_only=True``
(a checkpoint from elsewhere cannot run code) and refuses a format version this code
does not know.
"""
from __future__ import annotations

import errno
import glob
import logging
import os
import shutil

import numpy as np
import torch

from ..dataset.durable import fsync_folder
from .config import TrainError

log = logging.getLogger("feedline.train")

CHECKPOINT_FORMAT = "feedline-train"
CHECKPOINT_VERSION = 1
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
# Beyond the tensors' bytes: the pickled structure (names, config, history), and per tensor
# a zip entry header and alignment (a few hundred bytes; 1 KiB allowed).
_OVERHEAD, _PER_TENSOR = 64 << 10, 1 << 10


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


def size_estimate(obj) -> int:
    """Bytes a checkpoint of ``obj`` takes on disk, a little more than measured: its tensors'
    bytes plus room for the zip entries and the pickled rest."""
    def tensors(o) -> tuple[int, int]:
        if isinstance(o, torch.Tensor):
            return o.numel() * o.element_size(), 1
        parts = o.values() if isinstance(o, dict) else o if isinstance(o, (list, tuple)) else ()
        sizes = [tensors(v) for v in parts]
        return sum(s for s, _ in sizes), sum(n for _, n in sizes)
    nbytes, count = tensors(obj)
    return nbytes + _OVERHEAD + _PER_TENSOR * count


def save(state: dict, path: str) -> None:
    """Write ``state`` to ``path`` so that ``path`` is always either the old or the new file.
    A full disk is a TrainError that says so, with the space needed and free, before any
    byte is written when the shortage is known, else when the write fails."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    state = plain(state)
    needed = size_estimate(state)
    if shutil.disk_usage(folder).free < needed:
        raise _disk_full(path, folder, needed)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            _write(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, Exception) and _is_disk_full(exc):
            raise _disk_full(path, folder, needed) from None
        raise
    fsync_folder(folder)


def _is_disk_full(exc: BaseException) -> bool:
    """True when ``exc`` or what caused it is ENOSPC/EDQUOT: torch.save reports a failed
    write as a RuntimeError ("unexpected pos") whose context is the OSError."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _DISK_FULL:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _disk_full(path: str, folder: str, needed: int) -> TrainError:
    free = shutil.disk_usage(folder).free
    previous = (f"the previous checkpoint {path} is intact" if os.path.exists(path)
                else f"no checkpoint was written to {path} yet")
    return TrainError(f"disk full: saving the checkpoint {path} needs about {needed / 2**20:,.1f} MiB, "
                      f"{free / 2**20:,.1f} MiB are free in {folder}; {previous}. Free some space (or "
                      "pass another --out) and run the same command with --resume to continue")


def remove_stale_temporaries(path: str) -> list[str]:
    """Delete what writes of ``path`` killed mid-way left behind (``path.tmp-PID``); only the
    process that writes checkpoints may call this. Returns the files removed."""
    removed = []
    for tmp in glob.glob(glob.escape(path) + ".tmp-*"):
        if tmp.endswith(f".tmp-{os.getpid()}"):
            continue
        try:
            os.unlink(tmp)
            removed.append(tmp)
        except FileNotFoundError:
            pass
    if removed:
        log.info("removed %d unfinished checkpoint write(s) left by a killed run: %s", len(removed),
                 ", ".join(os.path.basename(r) for r in removed))
    return removed


def load(path: str) -> dict:
    """The checkpoint at ``path`` on the CPU; TrainError when it is missing, unreadable, not
    a feedline training checkpoint, or of a version this code does not know."""
    if not os.path.exists(path):
        log_file = os.path.join(os.path.dirname(path), "metrics.jsonl")
        if os.path.exists(log_file):   # a --synthetic run, or one stopped before its first save
            raise TrainError(f"{path}: no checkpoint to resume from: the run in {os.path.dirname(path) or '.'} saved "
                             "none (a --synthetic run, or one stopped before its first checkpoint); start it afresh "
                             "with --overwrite instead of --resume")
        raise TrainError(f"{path}: no checkpoint to resume from; run without --resume first, "
                         "or pass --resume PATH to a checkpoint.pt")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for a damaged file
        raise TrainError(f"{path}: not a readable checkpoint ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}); "
                         "delete it or pass --resume PATH to another one") from None
    if not isinstance(state, dict) or "model" not in state or state.get("format") != CHECKPOINT_FORMAT:
        raise TrainError(f"{path}: not a feedline training checkpoint; pass --resume PATH to a "
                         "checkpoint.pt that `feedline train` wrote")
    check_version(state.get("version"), path)
    return state


def check_version(version, path: str) -> None:
    """TrainError naming both versions unless ``version`` is the one this code writes."""
    if version == CHECKPOINT_VERSION:
        return
    newer = isinstance(version, int) and version > CHECKPOINT_VERSION
    who = "a newer feedline: resume with that version" if newer else \
        "another feedline: resume with the version that wrote it"
    raise TrainError(f"{path}: checkpoint format version {version!r}, this feedline reads version "
                     f"{CHECKPOINT_VERSION}; it was written by {who}, or start afresh (without "
                     "--resume, or with another --out)")
