"""`feedline info OUT`: what a packed file (or an image folder) holds, without decoding."""
from __future__ import annotations


def register(subparsers) -> None:
    p = subparsers.add_parser("info", help="show what a packed file or image folder holds",
                              description="Show the record count, classes, bytes, image sizes, format "
                                          "and pack options of a packed file or image folder. "
                                          "Reads the columns and metadata only; nothing is decoded.")
    p.add_argument("dataset", metavar="OUT", help="packed .lmdb or .h5 file, shard index (OUT.shards.json), "
                                                  "quoted glob of shards, or an image folder")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--max-classes", type=int, default=20, metavar="N",
                   help="classes listed in the table (default 20; --json lists all)")
    p.set_defaults(func=run)


def run(args) -> int:
    import json

    from ..dataset.describe import describe, format_info
    info = describe(args.dataset)
    if args.json:
        print(json.dumps(info.to_dict(), indent=2))
    else:
        print(format_info(info, max_classes=args.max_classes))
    return 0
