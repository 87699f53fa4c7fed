"""`feedline verify OUT`: check every record's checksum and decode it, against the columns."""
from __future__ import annotations

import sys


def _positive(text: str) -> int:
    import argparse
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def register(subparsers) -> None:
    from ..decoders.registry import names
    p = subparsers.add_parser("verify", help="check every record's checksum and decode it",
                              description="Check every record: its bytes against the checksum stored when it "
                                          "was packed (files of format version 2 on), "
                                          "then a strict decode (a libjpeg warning such as corrupt data or a "
                                          "premature end makes the record bad), and that the record count, "
                                          "labels and image sizes agree with the metadata. With "
                                          "--checksums-only, nothing is decoded: as fast as the disk reads. "
                                          "Sharded data sets: give the index file (OUT.shards.json). "
                                          "Exit code 0 when all is well, 1 when problems were found (they "
                                          "are listed).")
    p.add_argument("dataset", metavar="OUT", help="packed .lmdb or .h5 file, shard index (OUT.shards.json), "
                                                  "quoted glob of shards, or an image folder")
    p.add_argument("--checksums-only", action="store_true",
                   help="compare checksums only, decode nothing (needs a file packed with checksums)")
    p.add_argument("--jobs", "-j", type=_positive, default=None, metavar="N",
                   help="threads (default: all cores)")
    p.add_argument("--decoder", default="auto", metavar="NAME",
                   help=f"decoder, in its strict mode (default auto: the fastest strict one installed, the one "
                        f"FeedLoader's 'auto' uses on CPU threads); also {', '.join(names(installed=False))}, or "
                        "one an installed package registers (entry point group 'feedline.decoders')")
    p.add_argument("--max-listed", type=int, default=100, metavar="N",
                   help="problems listed at most (default 100; 0 lists all)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from tqdm import tqdm

    from ..decoders.registry import registration
    from ..core.errors import FeedlineError
    from ..dataset.verify import VerifyMode, verify
    if args.decoder != "auto":
        try:
            registration(args.decoder)
        except ValueError as exc:
            raise FeedlineError(f"--decoder: {exc}") from None
    bar = tqdm(desc="verify", unit="img", file=sys.stderr, disable=not sys.stderr.isatty(),
               leave=False, delay=0.5)
    mode = VerifyMode.CHECKSUMS if args.checksums_only else VerifyMode.FULL
    try:
        result = verify(args.dataset, decoder=args.decoder, jobs=args.jobs, mode=mode,
                        on_progress=lambda done, total: _advance(bar, done, total))
    finally:
        bar.close()
    if args.json:
        import json
        print(json.dumps(result.to_dict(), indent=2))
        return 0 if result.ok else 1
    shown = result.problems if args.max_listed <= 0 else result.problems[:args.max_listed]
    for problem in shown:
        print(problem)
    if len(shown) < len(result.problems):
        print(f"... {len(result.problems) - len(shown):,} more problems (--max-listed 0 lists all)")
    print(result.summary())
    return 0 if result.ok else 1


def _advance(bar, done: int, total: int) -> None:
    if bar.total != total:
        bar.total = total
    bar.update(done - bar.n)
