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
decodes every JPEG stored as it is (strictly: a libjpeg warning such as corrupt data
or a premature end skips the file as corrupt), at the cost of a full decode per file.
Every record gets an xxh3_64 checksum of its bytes, checked by FeedLoader on every read
and by `feedline verify` (--checksums-only for a fast check of the bytes alone).

Symlinks: a file link is packed once, under its own path. A folder link is followed
only to a folder not already on the walk (one above it, which is a loop such as
zbad/loop_link -> .., or one packed under its real path); such links are skipped and
listed in OUT.errors.csv as symlink-loop or symlink-repeat.

--labels FILE.csv: rows of "relative path,label"; a header row is recognized. Integer
labels stay the integers they are (classes "0".."max"); other labels are class names,
numbered in sorted order. Images the CSV does not list (not-in-labels-csv) and rows
whose file is missing (missing) are listed in OUT.errors.csv, not packed.

Bad files (corrupt, truncated, empty, not an image, unreadable, over --max-pixels)
are skipped and listed in OUT.errors.csv (path,reason,detail), or stop the pack with
--on-error fail. OUT appears only when complete; after an interruption, rerun the
same command with --resume.

Disk space: before writing, pack estimates what it needs (the input's bytes plus the
format's overhead) and refuses when the output's filesystem has less free. If the
disk fills anyway, the partial output is kept: free space and rerun with --resume."""


def register(subparsers) -> None:
    from converters.options import DEFAULT_MAX_PIXELS, DEFAULT_QUALITY  # light: no image libraries
    p = subparsers.add_parser("pack", help="pack an image folder into one LMDB or HDF5 file",
                              description=_DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", help="image folder (ImageFolder layout)")
    p.add_argument("out", help="output file: OUT.lmdb, OUT.h5 or OUT.hdf5")
    p.add_argument("--format", choices=("lmdb", "hdf5"), help="output format (default: from OUT's extension)")
    p.add_argument("--labels", metavar="FILE.csv", help="labels from a CSV of (relative path, label)")
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
    p.add_argument("--no-space-check", dest="space_check", action="store_false",
                   help="start even when the disk-space estimate says the output will not fit")
    p.add_argument("--jobs", type=int, metavar="N", help="reader/converter threads (default: one per core)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted pack of the same OUT")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT once the new one is complete")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no summary")
    p.set_defaults(func=run)


def run(args) -> int:
    from converters import PackOptions, pack
    options = PackOptions(format=args.format, labels_csv=args.labels, max_side=args.max_side,
                          quality=args.quality, max_pixels=args.max_pixels, on_error=args.on_error,
                          check=args.check, space_check=args.space_check, jobs=args.jobs, resume=args.resume, overwrite=args.overwrite,
                          progress=not args.quiet)
    report = pack(args.src, args.out, options)
    if not args.quiet:
        print("\n".join(report.summary_lines()))
    return 0
