"""`feedline sample OUT`: a realistic JPEG folder from the shipped photos."""
from __future__ import annotations


def register(subparsers) -> None:
    p = subparsers.add_parser("sample", help="write a realistic sample image folder (ImageFolder layout)",
                              description="Write photo-like JPEGs cut from the public-domain photos "
                                          "feedline ships, in ImageFolder layout.")
    p.add_argument("out", help="output folder (created)")
    p.add_argument("-n", type=int, default=600, help="number of images (default 600)")
    p.add_argument("--classes", type=int, default=6, help="number of class folders (default 6)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--photo-per-class", action="store_true",
                   help="cut class k from photo k only, so that the labels can be learned")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..sample import make_photo_folder
    summary = make_photo_folder(args.out, n=args.n, classes=args.classes, seed=args.seed,
                                photo_per_class=args.photo_per_class)
    print(f"{summary['images']} images in {summary['classes']} classes, "
          f"{summary['mean_kib']:.1f} KiB mean -> {args.out}")
    return 0
