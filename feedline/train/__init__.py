"""The included trainer: ResNet-18/50 or a tiny CNN on FeedLoader, one GPU, CPU or torchrun/DDP.

``feedline train TRAIN ...`` and ``python -m feedline.train ...`` are the command line;
``train(TrainConfig(...))`` is the same run from Python.
"""
from __future__ import annotations

from .config import TrainConfig, TrainError
from .run import TrainResult, train

__all__ = ["TrainConfig", "TrainError", "TrainResult", "train"]
