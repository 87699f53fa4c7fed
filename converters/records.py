"""What checking one input file gives: the Record to store, or the Conversion to run;
and the target columns of the records packed.

Shared by the cheap header check (`normalize`) and the slow re-encode (`reencode`),
so that neither imports the other's libraries: checking a JPEG stored as it is needs
no Pillow, OpenCV or numpy. Named tuples, not dataclasses: one of each is made per
file, and a tuple is made (and its class defined) several times faster.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from feedline.core.errors import PackError
from feedline.fields.base import stored_sizes
from feedline.dataset.scan import ScanResult

from .options import LabelsFrame, PackOptions
from .report import Skip, SkipReason


class Record(NamedTuple):
    data: bytes
    height: int                 # of the stored image
    width: int
    converted: str | None       # why it was re-encoded; None when stored byte for byte
    source_bytes: int
    warning: str | None = None  # a benign libjpeg warning met by the decode check (jpeg_warnings)
    orientation: int = 1        # the EXIF orientation applied to the pixels (1: none)
    mask: object = None         # its segmentation mask, packed (masks.PackedMask), when the labels have masks


class Conversion(NamedTuple):
    """A file that must be decoded and re-encoded: the slow case, run on the thread pool."""

    rel: str
    data: bytes
    why: str
    bits: int | None = None     # sample precision of a JPEG
    exotic: bool = False        # a JPEG process decoders may lack (12-bit, lossless, arithmetic)
    draft: tuple[int, int] | None = None   # a JPEG shrunk to max_side: (width, height) to decode at least,
                                           # DCT-scaled by libjpeg (1/2, 1/4, 1/8), never the full size
    orientation: int = 1        # a JPEG's EXIF orientation, from its header


def too_large(rel: str, width: int, height: int, options: PackOptions, decoded: int | None = None) -> Skip:
    """The skip of an image whose decode would exceed --max-pixels; ``decoded``: the pixels of
    a JPEG's DCT-scaled decode toward --max-side, when that too is over."""
    if decoded is not None:
        return Skip(rel, SkipReason.TOO_LARGE,
                    f"{width}x{height}: even decoded at 1/8 scale toward --max-side {options.max_side} it has "
                    f"{decoded} pixels > --max-pixels {options.max_pixels}; raise --max-pixels")
    hint = ("; pass --max-side N to shrink it (a JPEG is decoded DCT-scaled, never at full size) or "
            "raise --max-pixels") if options.max_side is None else "; raise --max-pixels"
    return Skip(rel, SkipReason.TOO_LARGE,
                f"{width}x{height} = {width * height} pixels > --max-pixels {options.max_pixels}{hint}")


def dct_draft(height: int, width: int, max_side: int) -> tuple[tuple[int, int], int]:
    """For a JPEG shrunk so its longer side is ``max_side``: the (width, height) to ask the
    decoder for (each side at least what the resize needs), and the pixels libjpeg's DCT
    scaling (1/1, 1/2, 1/4, 1/8, the strongest that keeps that size) then decodes."""
    scale = max_side / max(height, width)
    want = (max(1, math.ceil(width * scale)), max(1, math.ceil(height * scale)))
    d = max(d for d in (1, 2, 4, 8) if -(-width // d) >= want[0] and -(-height // d) >= want[1])
    return want, -(-width // d) * -(-height // d)


class TargetRefused(PackError):
    """A target that its image refuses (a box wholly outside it): the labels file must change."""


def add_target_columns(columns: dict, scan: ScanResult, paths: list[str], sizes: list[list[int]],
                       oriented: list[list[int]] = (), frame: LabelsFrame | None = None,
                       mask_checksums: list[int] = ()) -> int:
    """Add to ``columns`` the stored bytes of the fields beyond label (`feedline.fields`) of the
    records packed, ``paths`` in record order, fitted to their images (``sizes``: boxes partly
    outside are clipped); returns how many values were fitted. Values in the stored frame of
    images turned by their EXIF orientation (``oriented``: (record, orientation) pairs) are
    turned with them. Taken from the scan at the end, so a resumed pack needs no targets in its
    journal; but the masks' checksums, known once each mask is packed (``mask_checksums``)."""
    if scan.targets is None or not scan.targets.fields:
        return 0
    targets = scan.targets.take([scan.places[p] for p in paths])
    if scan.masks is not None:
        import numpy as np
        targets.arrays["mask_checksums"] = np.asarray(mask_checksums, dtype=np.uint64)
    if frame is LabelsFrame.STORED and oriented:
        targets = targets.oriented(orientations(oriented, 0, len(paths)), sizes)
    fitted, changed = targets.fitted(sizes)
    columns.update(fitted.to_bytes())
    return changed


def orientations(oriented, first: int, count: int) -> list[int] | None:
    """The EXIF orientation applied to each of records ``first`` .. ``first + count - 1``, from
    the (record, orientation) pairs of those turned; None when none was."""
    if not oriented:
        return None
    turned = [1] * count
    for record, orientation in oriented:
        turned[record - first] = orientation
    return turned


def refuse_unframed(scan: ScanResult, path: str, orientation: int, frame: LabelsFrame | None) -> None:
    """TargetRefused when ``path``, whose pixels pack turns by its EXIF ``orientation``, has boxes,
    keypoints or a mask and no --labels-frame says which pixels they are in."""
    if frame is not None or orientation == 1 or scan.targets is None or not scan.targets.fields:
        return
    if scan.targets.take([scan.places[path]]).annotated()[0]:
        what = " and ".join(name for name, f in scan.targets.kinds.items() if f.in_pixels)
        raise TargetRefused(f"{scan.labels_file}: {scan.rows.get(path, 'the row')} ({path}): the image has EXIF "
                            f"orientation {orientation}, which pack applies to its pixels, and its {what} "
                            "would no longer lie on what they mark: pass --labels-frame stored (they are on the "
                            "file's pixels as stored, as COCO's are: turned with the image) or --labels-frame "
                            "displayed (they are on the image as shown, turned already); nothing written")


def _frame_words(orientation: int, frame: LabelsFrame | None) -> str:
    if orientation == 1:
        return "coordinates in the pixels of the image as stored"
    if frame is LabelsFrame.STORED:
        return (f"coordinates in the stored frame: the file's pixels before its EXIF orientation {orientation}, "
                "--labels-frame stored")
    return f"coordinates in the displayed frame: the image after its EXIF orientation {orientation}, --labels-frame displayed"


def with_flip_pairs(scan: ScanResult, pairs) -> ScanResult:
    """``scan`` with --flip-pairs in its keypoints' spec (stored in the metadata); PackError when
    the labels have no keypoints or a pair does not fit them."""
    if not pairs:
        return scan
    from dataclasses import replace

    from feedline.fields import FieldsError
    from feedline.dataset.targets import with_options
    if scan.targets is None:
        raise PackError(f"--flip-pairs: {scan.root} has no labels file with keypoints: give --labels FILE.jsonl")
    try:
        targets = with_options(scan.targets, flip_pairs=[list(p) for p in pairs])
    except FieldsError as exc:
        raise PackError(f"--flip-pairs: {scan.labels_file}: {exc}") from None
    return replace(scan, fields={**scan.fields, **targets.fields}, targets=targets)


def check_resizing(scan: ScanResult, max_side: int | None) -> None:
    """PackError before anything is written when --max-side would shrink images whose targets
    are in their source pixels (boxes, keypoints): those would no longer match the pixels."""
    kinds = [] if max_side is None or scan.targets is None else \
        [name for name, f in scan.targets.kinds.items() if f.in_pixels]
    if kinds:
        raise PackError(f"{scan.labels_file}: its {' and '.join(kinds)} are in source pixels, and --max-side "
                        f"{max_side} would shrink the larger images under them: pack without --max-side (the "
                        "loader resizes every crop anyway)")


def check_targets(scan: ScanResult, paths: list[str], sizes: list[list[int]], oriented: list[list[int]] = (),
                  first: int = 0, frame: LabelsFrame | None = None) -> None:
    """TargetRefused naming the labels file, its row, the file and the labels' frame for the first
    target of records ``first`` .. (``paths``) that its image refuses (``sizes``: the packed
    (height, width) of each; ``oriented``: (record, EXIF orientation applied) of those turned), by
    the rule ``feedline verify`` applies (a box wholly outside its image), in the labels' frame."""
    if scan.targets is None or not scan.targets.fields or not paths:
        return
    import numpy as np   # targets beyond label hold numpy columns already
    turned = np.asarray(orientations(oriented, first, len(paths)) or [1] * len(paths))
    in_frame = stored_sizes(turned, sizes) if frame is LabelsFrame.STORED else sizes
    problems = scan.targets.take([scan.places[p] for p in paths]).problems(in_frame)
    if problems:
        k, text = problems[0]
        more = f"; {len(problems) - 1} more in these {len(paths)} files" if len(problems) > 1 else ""
        raise TargetRefused(f"{scan.labels_file}: {scan.rows.get(paths[k], 'the row')} ({paths[k]}): {text}: correct "
                            f"it in the labels file ({_frame_words(int(turned[k]), frame)}) or remove "
                            f"it{more}; nothing written")
