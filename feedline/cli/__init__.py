"""The `feedline` command: argument parsing only; each subcommand lives in its own module.

Each module here has ``register(subparsers)``, which adds its parser and sets
``func(args) -> int`` as the default. Errors the user can fix are FeedlineError:
printed as one line, exit code 2.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from ..errors import FeedlineError

COMMANDS = ("pack", "info", "verify", "sample", "train")


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__
    parser = argparse.ArgumentParser(prog="feedline", description="Keep GPUs fed with images.")
    parser.add_argument("--version", action="version", version=f"feedline {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f".{name}", __package__).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except FeedlineError as exc:
        print(f"feedline {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"feedline {args.command}: interrupted", file=sys.stderr)
        return 130
