"""`feedline bench decoders|loaders [DATA]`: the benchmarks of feedline.benchmarks.

The same parsers serve ``python bench/decoders.py`` and ``python bench/loaders.py``
(see `standalone`), so both spell every option the same way.
"""
from __future__ import annotations

import argparse
import dataclasses

DATA_HELP = ("packed .lmdb/.h5 file or image folder (default: photo-like JPEGs generated from the "
             "shipped photos into --cache-dir, and packed there)")


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="benchmark the decoders or the loaders",
                              description="Benchmark JPEG decoders, or FeedLoader against a torch DataLoader, "
                                          "DALI on the CPU and the decode floor. Prints a table, writes JSON "
                                          "and a PNG chart.")
    which = p.add_subparsers(dest="which", metavar="WHICH", required=True)
    add_decoder_arguments(which.add_parser("decoders", help="images/s of each JPEG decoder vs PIL",
                                           description=_description("decoders")))
    add_loader_arguments(which.add_parser("loaders", help="FeedLoader vs DataLoader, DALI-CPU and the decode floor",
                                          description=_description("loaders")))


# Written out, not read from the modules' docstrings: building the parser of every
# `feedline` command must not import torch.
DESCRIPTIONS = {
    "decoders": "Images/s and megapixels/s of each JPEG decoder (PIL, OpenCV, PyTurboJPEG and its fast and "
                "DCT-scaled modes, DALI on the CPU, nvJPEG through DALI and torchvision on a GPU, feedline's "
                "own decoders) on one thread and on all cores, the ratio to PIL, and the mean absolute pixel "
                "difference to PIL's decode. Unavailable backends are listed with the reason.",
    "loaders": "FeedLoader against a torch DataLoader decoding with PIL, a DALI CPU pipeline and the "
               "libjpeg-turbo decode floor, on the same images with the same work (random-resized crop 224 + "
               "flip + normalize to float32, batch 64, drop_last) and the same cores; the target ratios with "
               "pass/fail, and FeedLoader's resident memory over epochs.",
}


def _description(which: str) -> str:
    return DESCRIPTIONS[which]


def _shared(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("data", nargs="?", metavar="DATA", help=DATA_HELP)
    p.add_argument("--threads", type=int, metavar="T", help="threads for 'all cores' (default: usable cores)")
    p.add_argument("--repeats", type=int, metavar="R",
                   help="timed repeats, interleaved across backends (default 5 for decoders, 3 for loaders)")
    p.add_argument("--quick", action="store_true", help="a tiny run that finishes in seconds (for tests)")
    p.add_argument("--out", metavar="PATH", help=f"JSON path; the PNG goes next to it "
                                                 f"(default bench/results/{name}.json)")
    p.add_argument("--cache-dir", metavar="DIR", help="where generated and packed data sets are kept "
                                                      "(default ~/.cache/feedline)")
    p.add_argument("--only", metavar="NAMES", type=_names, help="comma-separated row names to run")
    p.add_argument("--no-chart", dest="chart", action="store_false", default=None, help="skip the PNG")


def add_decoder_arguments(p: argparse.ArgumentParser) -> None:
    _shared(p, "decoders")
    p.add_argument("--n", type=int, metavar="N", help="images decoded per pass, and generated without DATA "
                                                      "(default 200)")
    p.add_argument("--batch", type=int, metavar="B", help="batch size of DALI and the GPU decoders (default 64)")
    p.add_argument("--check", type=int, metavar="K", help="images compared with PIL (default 16)")
    p.add_argument("--warmup", type=int, metavar="W", help="untimed warm-up passes (default 1)")
    p.add_argument("--no-feedline", dest="feedline", action="store_false", default=None,
                   help="skip feedline's own decoders (decode_into a 224 crop)")
    p.set_defaults(func=run_decoders)


def add_loader_arguments(p: argparse.ArgumentParser) -> None:
    _shared(p, "loaders")
    p.add_argument("--n", type=int, metavar="N", help="images generated without DATA (default 2000)")
    p.add_argument("--batches", type=int, metavar="N", help="timed batches per measurement "
                                                           "(default max(20, 3 x threads))")
    p.add_argument("--batch-size", type=int, metavar="B", help="batch size (default 64)")
    p.add_argument("--warmup", type=int, metavar="W", help="batches consumed when a loader starts (default 8)")
    p.add_argument("--drain", type=int, metavar="D", help="untimed batches before each measurement "
                                                          "(default 2 x threads + 2)")
    p.add_argument("--device", help="FeedLoader's device (default: cuda when available, else cpu)")
    p.add_argument("--epochs-rss", type=int, metavar="E", help="FeedLoader epochs of the memory check "
                                                               "(default 5; 0 skips it)")
    p.add_argument("--floor-images", type=int, metavar="N", help="images of the decode-floor measurement "
                                                                 "(default 200)")
    p.set_defaults(func=run_loaders)


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def options_from_args(cls, quick: dict, args):
    """``cls`` (an options dataclass) from the flags given; --quick supplies tiny defaults."""
    values = dict(quick) if args.quick else {}
    for field in dataclasses.fields(cls):
        value = getattr(args, field.name, None)
        if value is not None:
            values[field.name] = value
    try:
        return cls(**values)
    except ValueError as exc:
        from ..errors import FeedlineError
        raise FeedlineError(str(exc)) from None


def run_decoders(args) -> int:
    from ..benchmarks.decoders import QUICK, DecoderBenchOptions, run_decoder_bench
    run_decoder_bench(options_from_args(DecoderBenchOptions, QUICK, args))
    return 0


def run_loaders(args) -> int:
    from ..benchmarks.loaders import QUICK, LoaderBenchOptions, run_loader_bench
    run_loader_bench(options_from_args(LoaderBenchOptions, QUICK, args))
    return 0


def standalone(which: str, argv: list[str] | None = None, default_out: str | None = None) -> int:
    """``python bench/WHICH.py``: the same options as ``feedline bench WHICH``, without
    the rest of the command line (so it runs while other subcommands are broken)."""
    import logging
    import sys

    from ..errors import FeedlineError
    p = argparse.ArgumentParser(prog=f"bench/{which}.py", description=_description(which))
    (add_decoder_arguments if which == "decoders" else add_loader_arguments)(p)
    p.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    if default_out is not None:
        p.set_defaults(out=default_out)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except FeedlineError as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 2
