"""The trainer's command line: its flags, what a run prints, and ``main`` for
``python -m feedline.train``; `feedline train` (feedline/cli/train.py) registers the same
flags and ``run``. It lives with the trainer so that the trainer never imports the CLI.

The flags are generated from TrainConfig's fields (feedline/core/flags.py); building the parser
imports no torch.
"""
from __future__ import annotations

import argparse
import logging
import sys

from ..core.errors import FeedlineError
from ..core.flags import add_dataclass_arguments, config_from_args, parse_with_hints
from ..dataset.unwritable import writing_to
from .config import TrainConfig, TrainError
from .timm_flags import UNKNOWN_FLAG_ANSWERS

DESCRIPTION = (
    "Train a ResNet (or a tiny CNN) on a packed data set or image folder with FeedLoader: one GPU, "
    "the CPU, or several GPUs/nodes with `torchrun --nproc_per_node=N -m feedline.train ...` "
    "(DistributedDataParallel: NCCL on GPUs, gloo on CPUs; only rank 0 logs and saves). "
    "Ends with a short run on synthetic data and prints real/synthetic throughput: the share "
    "of the model's speed the data pipeline delivers.")

EPILOG = (
    "If a rank or node dies, the others stop within about --timeout seconds (under torchrun at once: "
    "it stops every worker when one fails) and each says so in one line; the last checkpoint stays "
    "whole. Restart the same command with --resume to continue from it.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_dataclass_arguments(parser, TrainConfig)
    parser.set_defaults(unknown_flag_answers=UNKNOWN_FLAG_ANSWERS)   # timm's flags that are not ours


def run(args) -> int:
    from . import train
    cfg = config_from_args(TrainConfig, args)
    try:
        with writing_to(cfg.out, "--out"):
            result = train(cfg)
    except FeedlineError as exc:  # e.g. a bad record under --on-error raise: in the words of the flags
        if "on_error='substitute'" not in str(exc):
            raise
        raise TrainError(str(exc).replace("on_error='substitute'", "--on-error substitute")) from None
    if result.metrics is None:  # not rank 0: rank 0 speaks for the job
        return 0
    if result.history:
        last = result.history[-1]
        line = f"{result.epochs_done} epoch(s), {result.steps} steps, train loss {last['train_loss']:.4f}"
        if "top1" in last:
            line += f", val top-1 {last['top1']:.1%}, top-5 {last['top5']:.1%}"
        if "ema_top1" in last:
            line += f", EMA val top-1 {last['ema_top1']:.1%}, top-5 {last['ema_top5']:.1%}"
        if "mIoU" in last:
            line += f", val mIoU {last['mIoU']:.1%}"
        print(line)
    elif cfg.synthetic and result.synthetic_images_per_s:
        print(f"synthetic: {result.synthetic_images_per_s:,.0f} images/s per rank")
    if result.bad_records:
        print(f"bad records: {result.bad_records} (substituted; listed in {result.metrics})")
    if result.pipeline_share is not None:
        print(f"real/synthetic: {result.pipeline_share:.0%} ({result.real_images_per_s:,.0f} vs "
              f"{result.synthetic_images_per_s:,.0f} images/s per rank)")
    if result.stopped_early:
        print(f"stopped at step {result.steps} (--max-steps); continue with --resume")
    if result.checkpoint:
        print(f"checkpoint: {result.checkpoint}")
    print(f"metrics: {result.metrics}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m feedline.train``: the same options, logging and exit codes as `feedline train`."""
    parser = argparse.ArgumentParser(prog="python -m feedline.train", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    add_arguments(parser)
    args = parse_with_hints(parser, argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return run(args)
    except FeedlineError as exc:
        print(f"feedline train: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("feedline train: interrupted", file=sys.stderr)
        return 130
