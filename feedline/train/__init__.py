"""The included trainer: ResNet-18/50 or a tiny CNN on FeedLoader, one GPU, CPU or torchrun/DDP.

``feedline train TRAIN ...`` and ``python -m feedline.train ...`` are the command line;
``train(TrainConfig(...))`` is the same run from Python.
"""
from __future__ import annotations

from .config import TrainConfig, TrainError

# Imported when first asked for: the command line builds its parser from TrainConfig
# without importing torch.
_LAZY = {"train": ".run", "TrainResult": ".result"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'feedline.train' has no attribute {name!r}")


__all__ = ["TrainConfig", "TrainError", "TrainResult", "train"]
