"""`feedline pack SRC OUT`: an image folder into one LMDB or HDF5 file."""
from __future__ import annotations

import argparse

_DESCRIPTION = """\
Pack an image folder (one subfolder per class, labels = sorted folder names; a folder
without subfolders is one class; or --labels FILE.csv of "relative path,label") into
one file. The format follows OUT's extension (.lmdb, .h5, .hdf5) unless --format says.

JPEGs that every decoder reads (baseline/progressive, 8-bit, YCbCr or gray, no EXIF
rotation) are stored byte for byte after a header check, without decoding: run
`feedline verify OUT` to decode every record. Everything else (PNG, WebP, BMP, TIFF,
GIF's first frame, CMYK, 12/16-bit, palette) is converted once to a baseline JPEG:
transparency is composited on white, EXIF orientation is applied, 16-bit is scaled
to 8-bit, gray stays gray.

Damage inside a JPEG's image data passes the header check; --check decode also
decodes every JPEG stored as it is (strictly: a libjpeg warning that damages pixels, such
as corrupt data or a premature end, skips the file as corrupt; a harmless one, such as
extraneous bytes or a bad ICC or EXIF segment, keeps it and is counted in `feedline info`),
at the cost of a full decode per file.
Every record gets an xxh3_64 checksum of its bytes, checked by FeedLoader on every read
and by `feedline verify` (--checksums-only for a fast check of the bytes alone).

Symlinks: a file link is packed once, under its own path. A folder link is followed
only to a folder not already on the walk (one above it, which is a loop such as
zbad/loop_link -> .., or one packed under its real path); such links are skipped and
listed in OUT.errors.csv as symlink-loop or symlink-repeat.

--labels FILE: a CSV of "relative path,label" (a header row is recognized), or named
columns: path, label (one class), labels (classes separated by ';'), target (a number,
or numbers separated by ';'), mask (a single-channel 8- or 16-bit PNG of class indices, the
image's size: checked and packed losslessly beside it); or JSON Lines (FILE.jsonl), one object per image:
{"path": ..., "label": ..., "labels": [...], "target": [...], "boxes": [[x0, y0, x1, y1,
class], ...], "keypoints": [[x, y, visible], ...]} (boxes and keypoints in source pixels;
a box wholly outside its image stops the pack with its row, one partly outside is
clipped). An image with an EXIF orientation is packed turned as viewers show it; if it has
boxes, keypoints or a mask, --labels-frame must say which pixels they are on: stored (the file's
pixels before the turn, as COCO's are: they are turned with the image) or displayed (the
image as shown: kept as given). --flip-pairs 1:2,3:4 names the keypoints that trade places
when an image is mirrored (left and right wrist...), stored with the data set: the loader's
flips then keep each point's name. Each of label, labels and the box classes has its own class list: integer
classes stay the integers they are (classes "0".."max"); other classes are names,
numbered in sorted order. Images the
file does not list (not-in-labels-csv) and rows whose file is missing (missing) are
listed in OUT.errors.csv, not packed.

Bad files (corrupt, truncated, empty, not an image, unreadable, over --max-pixels)
are skipped and listed in OUT.errors.csv (path,reason,detail), or stop the pack with
--on-error fail. OUT appears only when complete; after an interruption, rerun the
same command with --resume.

Disk space: before writing, pack estimates what it needs (the input's bytes plus the
format's overhead) and refuses when the output's filesystem has less free. If the
disk fills anyway, the partial output is kept: free space and rerun with --resume.

Shards: --shard-size 10GB (input bytes per shard) or --shard-size 100000 (files per
shard), or --num-shards N, writes OUT-00000-of-0000N.lmdb ... and OUT.shards.json,
the index that names them. Open the index (or a glob, or a list of the shards) with
open_dataset / FeedLoader / feedline info / feedline verify: one data set, one record
numbering. To split the work across machines, run on machine K (K = 0..N-1)
  feedline pack SRC OUT.lmdb --num-shards N --shard-index K
each packing its part of the sorted file list; the run that completes the last shard
writes the index, or run `feedline pack --join OUT.lmdb` once all shards lie together
(after copying them to one folder, say). Nothing is repacked to join."""


def register(subparsers) -> None:
    from converters.options import DEFAULT_MAX_PIXELS, DEFAULT_QUALITY  # light: no image libraries
    p = subparsers.add_parser("pack", help="pack an image folder into one LMDB or HDF5 file",
                              description=_DESCRIPTION, usage=_USAGE,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", nargs="?", help="image folder (ImageFolder layout), or WebDataset tar shards: a .tar "
                                          "or a quoted glob of them (KEY.jpg/.png with KEY.cls or KEY.json)")
    p.add_argument("out", nargs="?", help="output file: OUT.lmdb, OUT.h5 or OUT.hdf5, or s3://BUCKET/OUT.lmdb "
                                          "(with --num-shards N: each shard uploaded as it completes, the index last)")
    p.add_argument("--format", choices=("lmdb", "hdf5"), help="output format (default: from OUT's extension)")
    p.add_argument("--labels", metavar="FILE", help="labels file: CSV (path,label or named columns) or JSON Lines")
    p.add_argument("--labels-frame", choices=("stored", "displayed"),
                   help="the pixels a labels file's boxes, keypoints and masks are on, for images with an EXIF "
                        "orientation: stored (the file's, before the turn pack applies: turned with the image; "
                        "COCO's) or displayed (as shown: kept as given); needed only when such an image has them")
    p.add_argument("--flip-pairs", metavar="A:B,...",
                   help="keypoints (0-based) that trade places in a horizontal flip, e.g. 1:2,3:4 for left/right "
                        "eye and ear; stored with the data set and applied by every flip")
    p.add_argument("--max-side", type=int, metavar="N", help="shrink images whose longer side exceeds N")
    p.add_argument("--quality", type=int, default=DEFAULT_QUALITY,
                   help=f"JPEG quality of converted and shrunk images (default {DEFAULT_QUALITY})")
    p.add_argument("--max-pixels", type=int, default=DEFAULT_MAX_PIXELS, metavar="N",
                   help=f"skip images with more pixels (default {DEFAULT_MAX_PIXELS})")
    p.add_argument("--on-error", choices=("skip", "fail"), default="skip",
                   help="skip bad files and list them in OUT.errors.csv (default), or stop at the first")
    p.add_argument("--check", choices=("headers", "decode"), default="headers",
                   help="how JPEGs stored as they are get checked: headers only (default, fast), or also "
                        "a strict decode that skips damaged image data as corrupt")
    p.add_argument("--layout", choices=("original", "grid"), default="original",
                   help="grid: transcode every JPEG losslessly with a restart marker after every MCU, so "
                        "the loader decodes only each crop's part (damaged image data is skipped as with "
                        "--check decode); original (default): the source's bytes as they are")
    p.add_argument("--no-space-check", dest="space_check", action="store_false",
                   help="start even when the disk-space estimate says the output will not fit")
    p.add_argument("--shuffle", type=int, metavar="SEED",
                   help="store the records in a random order from SEED instead of sorted: records of "
                        "every class then lie side by side, as order='quasi-random' needs (default: sorted)")
    p.add_argument("--jobs", type=int, metavar="N", help="reader/converter threads (default: one per core)")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted pack of the same OUT (an OUT already complete, from the same "
                        "input and options, is reported and left as it is)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT once the new one is complete")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no summary")
    shards = p.add_argument_group("shards")
    shards.add_argument("--shard-size", metavar="SIZE",
                        help="shards of SIZE input bytes (10GB, 512MiB) or of SIZE files (100000)")
    shards.add_argument("--num-shards", type=int, metavar="N", help="N shards of equal file counts")
    shards.add_argument("--shard-index", type=int, metavar="K",
                        help="pack only shard K (0..N-1) of the split: one part on each machine")
    shards.add_argument("--join", action="store_true",
                        help="write OUT.shards.json for the complete shards next to OUT: feedline pack --join OUT")
    p.set_defaults(func=run)


_USAGE = """feedline pack SRC OUT [options]
       feedline pack --join OUT"""


def run(args) -> int:
    from converters import PackOptions, join_shards, pack
    from converters.options import parse_flip_pairs, parse_shard_size

    from ..core.errors import FeedlineError
    from ..dataset.unwritable import writing_to
    if args.join:
        if args.src is None or args.out is not None:
            raise FeedlineError("--join takes OUT alone: feedline pack --join OUT.lmdb")
        with writing_to(args.src):
            path = join_shards(args.src)
        if not args.quiet:
            print(f"wrote {path}")
        return 0
    if args.out is None:
        raise FeedlineError("pack needs SRC and OUT: feedline pack SRC OUT.lmdb")
    sharding = parse_shard_size(args.shard_size) if args.shard_size is not None else {}
    options = PackOptions(format=args.format, labels_csv=args.labels, max_side=args.max_side,
                          quality=args.quality, max_pixels=args.max_pixels, on_error=args.on_error,
                          check=args.check, space_check=args.space_check, jobs=args.jobs, resume=args.resume,
                          overwrite=args.overwrite, progress=not args.quiet, num_shards=args.num_shards,
                          shard_index=args.shard_index, shuffle=args.shuffle, layout=args.layout,
                          labels_frame=args.labels_frame,
                          flip_pairs=parse_flip_pairs(args.flip_pairs) if args.flip_pairs else None, **sharding)
    from ..dataset.urls import url_scheme
    if url_scheme(args.out):   # a bucket: nothing local to check (pack refuses a scheme it does not write)
        report = pack(args.src, args.out, options)
    else:
        with writing_to(args.out):
            report = pack(args.src, args.out, options)
    if not args.quiet:
        print("\n".join(report.summary_lines()))
    return 0
