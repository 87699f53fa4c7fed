"""`feedline train TRAIN`: the included trainer. Its flags, and what a run prints, are the
trainer's own (feedline/train/command.py, shared with ``python -m feedline.train``)."""
from __future__ import annotations

from ..train.command import DESCRIPTION, EPILOG, add_arguments, run


def register(subparsers) -> None:
    p = subparsers.add_parser("train", help="train a ResNet with FeedLoader (one GPU, CPU, or torchrun)",
                              description=DESCRIPTION, epilog=EPILOG)
    add_arguments(p)
    p.set_defaults(func=run)
