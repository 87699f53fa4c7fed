"""The `feedline` command: argument parsing only; each subcommand lives in its own module.

Each module here has ``register(subparsers)``, which adds its parser and sets
``func(args) -> int`` as the default. Only the module of the command being run is
imported (`feedline --help` imports none of them), and building a parser imports no
tensor, array or image library: a command imports those when it runs, so the command
line answers at once.

Exit codes: what the command returns; 2 for a bad command line or an error the user
can fix (FeedlineError, printed as one line); 130 when interrupted; 141 when the
reader of our output went away (`feedline info x | head -1`): quietly, with the
status a shell reports for any Unix tool stopped by a closed pipe.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from ..core.errors import FeedlineError
from ..core.flags import parse_with_hints

# name -> the one line `feedline --help` shows; the parser itself lives in cli/NAME.py.
COMMANDS = {
    "pack": "pack an image folder into one LMDB or HDF5 file",
    "info": "show what a packed file or image folder holds",
    "verify": "decode every record and check it",
    "sample": "write a realistic sample image folder (ImageFolder layout)",
    "train": "train a ResNet with FeedLoader (one GPU, CPU, or torchrun)",
    "show": "write one batch as a PNG grid with its targets drawn",
}
EXIT_BROKEN_PIPE = 128 + 13   # 128 + SIGPIPE, as the shell reports `yes | head -1`


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of `feedline`: the full parser of ``command`` (from its module) and a
    one-line entry for every other command, whose module is not imported."""
    from .. import __version__
    parser = argparse.ArgumentParser(prog="feedline", description="Keep GPUs fed with images.")
    parser.add_argument("--version", action="version", version=f"feedline {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, summary in COMMANDS.items():
        if name == command:
            importlib.import_module(f".{name}", __package__).register(subparsers)
        else:
            subparsers.add_parser(name, help=summary)
    return parser


def command_parser(parser: argparse.ArgumentParser, command: str | None) -> argparse.ArgumentParser:
    """The parser of ``command`` inside `feedline`'s parser (the parser itself without one)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return action.choices[command]
    return parser


def chosen_command(argv: list[str]) -> str | None:
    """The command named on the command line: the first argument that is not an option
    (`feedline`'s own options take no value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        try:
            return run(argv)
        finally:
            sys.stdout.flush()   # a closed pipe shows here, not in the interpreter's exit
    except BrokenPipeError:
        # Later writes (the interpreter's own flush at exit) go nowhere instead of
        # printing a second traceback about the same closed pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


def run(argv: list[str]) -> int:
    """Parse ``argv`` and run its command; argparse exits (code 0 or 2) for --help,
    --version and a bad command line."""
    command = chosen_command(argv)
    parser = build_parser(command)
    args = parse_with_hints(parser, argv, command_parser(parser, command))
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
