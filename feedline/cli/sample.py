"""`feedline sample OUT`: a realistic JPEG folder from the shipped photos."""
from __future__ import annotations

import os
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser("sample", help="write a realistic sample image folder (ImageFolder layout)",
                              description="Write photo-like JPEGs cut from the public-domain photos "
                                          "feedline ships, in ImageFolder layout, into a new or empty "
                                          "folder. Progress goes to stderr, a line every 10% of the images.")
    p.add_argument("out", help="output folder (created; must be empty unless --merge)")
    p.add_argument("-n", type=int, default=600, help="number of images, at least 1 (default 600)")
    p.add_argument("--classes", type=int, default=6, help="number of class folders (default 6)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the crops, sizes and noise: the same seed writes the same files (default 0)")
    p.add_argument("--photo-per-class", action="store_true",
                   help="cut class k from photo k only, so that the labels can be learned")
    p.add_argument("--merge", action="store_true",
                   help="write into a folder that is not empty: files of the same name are replaced, "
                        "the others stay (and would be packed with the new ones)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..core.errors import FeedlineError
    from ..sample import make_photo_folder
    from ..dataset.unwritable import writing_to
    if args.n < 1:
        raise FeedlineError(f"-n {args.n}: a sample needs at least one image")
    if args.classes < 1:
        raise FeedlineError(f"--classes {args.classes}: a sample needs at least one class")
    _check_out(args.out, args.merge)
    classes = min(args.classes, args.n)  # a class folder needs an image: say so rather than promise more
    fewer = f" (not {args.classes}: each class needs an image; pass -n {args.classes} or more)" \
        if classes < args.classes else ""
    print(f"sample: writing {args.n:,} images in {classes} classes{fewer} into {args.out}", file=sys.stderr)
    with writing_to(args.out):
        summary = make_photo_folder(args.out, n=args.n, classes=classes, seed=args.seed,
                                    photo_per_class=args.photo_per_class, on_progress=_progress_printer(args.n))
    print(f"{summary['images']} images in {summary['classes']} classes, "
          f"{summary['mean_kib']:.1f} KiB mean -> {args.out}")
    return 0


def _check_out(out: str, merge: bool) -> None:
    from ..core.errors import FeedlineError
    if os.path.exists(out) and not os.path.isdir(out):
        raise FeedlineError(f"{out} is a file; name a folder to write the sample into")
    if os.path.isdir(out) and os.listdir(out) and not merge:
        raise FeedlineError(f"{out} is not empty ({len(os.listdir(out))} entries); the sample would mix with "
                            "them. Name a new folder, empty this one, or pass --merge to add to it")


def _progress_printer(total: int):
    """A line on stderr every 10% (every 500 images at most): readable in a log file too."""
    step = max(1, min(500, -(-total // 10)))

    def report(done: int, total: int) -> None:
        if done % step == 0 or done == total:
            print(f"sample: {done:,}/{total:,} images ({done / total:.0%})", file=sys.stderr, flush=True)
    return report
