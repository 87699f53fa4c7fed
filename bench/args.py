"""The flags every bench script shares, and how a script's flags become its options.

Each script (bench/decoders.py, bench/loaders.py) has an options dataclass, a QUICK
dict of tiny defaults for ``--quick``, a function adding its own flags, and calls
`run_main` from its ``main(argv)``.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from typing import Callable

from bench.common import QUICK_SAVE_REFUSED, SAVE_HELP, MeasurementError

DATA_HELP = ("packed .lmdb/.h5 file or image folder (default: photo-like JPEGs generated from the "
             "shipped photos into --cache-dir, and packed there)")


def shared_arguments(p: argparse.ArgumentParser, name: str) -> None:
    """DATA, --threads, --repeats, --quick, --out, --save, --cache-dir, --only, --no-chart, -v."""
    p.add_argument("data", nargs="?", metavar="DATA", help=DATA_HELP)
    p.add_argument("--threads", type=int, metavar="T", help="threads for 'all cores' (default: usable cores)")
    p.add_argument("--repeats", type=int, metavar="R", help="timed repeats, interleaved across rows")
    p.add_argument("--quick", action="store_true", help="a tiny run that finishes in seconds (for tests)")
    p.add_argument("--out", metavar="PATH", help=f"JSON path; the PNG goes next to it "
                                                 f"(default bench/results/local/{name}.json)")
    p.add_argument("--save", action="store_true", default=None, help=SAVE_HELP.replace("NAME", name))
    p.add_argument("--cache-dir", metavar="DIR", help="where generated and packed data sets are kept "
                                                      "(default .cache/ in the repository)")
    p.add_argument("--only", metavar="NAMES", type=names, help="comma-separated row names to run")
    p.add_argument("--no-chart", dest="chart", action="store_false", default=None, help="skip the PNG")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug messages")


def output_arguments(p: argparse.ArgumentParser, name: str) -> None:
    """--out and --save, for a script with its own flags (see bench.common: where results go)."""
    p.add_argument("--out", metavar="PATH", help=f"JSON path (default bench/results/local/{name}.json)")
    p.add_argument("--save", action="store_true", help=SAVE_HELP.replace("NAME", name))


def check_output_flags(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--quick with --save is refused (argparse's exit 2): a quick run is not kept."""
    if getattr(args, "quick", False) and args.save:
        p.error(QUICK_SAVE_REFUSED)


def names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def options_from_args(cls, quick: dict, args: argparse.Namespace):
    """``cls`` (an options dataclass) from the flags given; --quick supplies tiny defaults,
    and flags given explicitly win over them."""
    values = (dict(quick) | {"quick": True}) if args.quick else {}
    for field in dataclasses.fields(cls):
        value = getattr(args, field.name, None)
        if value is not None:
            values[field.name] = value
    return cls(**values)


def run_main(prog: str, description: str, options_cls, quick: dict,
             add_arguments: Callable[[argparse.ArgumentParser], None], run: Callable[[object], object],
             argv: list[str] | None = None) -> int:
    """Parse ``argv``, build the options, run the benchmark; a bad option is one line and exit 2."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    shared_arguments(p, prog.rsplit("/", 1)[-1].removesuffix(".py"))
    add_arguments(p)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    check_output_flags(p, args)
    try:
        options = options_from_args(options_cls, quick, args)
    except ValueError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    try:
        run(options)
    except MeasurementError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    return 0
