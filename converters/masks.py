"""A record's segmentation mask at pack time: its file read, checked against its image, turned
with the image when it is in the stored frame, and encoded for the store (`feedline.dataset.mask_codec`).

Runs on the pack's thread pool after the image's own check or conversion (its size and the
EXIF orientation pack applied are known then). A mask that does not fit its image stops the
pack (TargetRefused, naming the labels file's row): missing, unreadable, not single-channel
class indices, or another size than its image in the labels' frame. An image turned by its
EXIF orientation with no ``--labels-frame`` is left to `records.refuse_unframed`.
"""
from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np

from feedline.fields.base import stored_sizes
from feedline.dataset.mask_codec import MaskError, encode, read_png, values_of
from feedline.dataset.scan import ScanResult

from .normalize import read_file
from .options import LabelsFrame
from .records import Record, TargetRefused
from .report import Skip

# PIL's Image.transpose for each EXIF orientation (ImageOps.exif_transpose's table), as numpy
TURNS = {2: lambda m: m[:, ::-1], 3: lambda m: m[::-1, ::-1], 4: lambda m: m[::-1],
         5: lambda m: m.T, 6: lambda m: np.rot90(m, -1), 7: lambda m: m[::-1, ::-1].T,
         8: lambda m: np.rot90(m, 1)}


class PackedMask(NamedTuple):
    data: bytes          # as stored
    values: tuple        # its distinct class indices
    bits: int            # 8 or 16


class MaskJob(NamedTuple):
    """A file whose mask is packed once its image is done (``job``: the image's outcome or job)."""

    rel: str
    job: object


def turned(mask: np.ndarray, orientation: int) -> np.ndarray:
    """``mask`` turned as pack turns an image with EXIF ``orientation`` (1: as it is)."""
    return np.ascontiguousarray(TURNS[orientation](mask)) if orientation in TURNS else mask


class MaskPacker:
    """Thread-safe: reads and encodes one mask per call, with nothing shared."""

    def __init__(self, scan: ScanResult, frame: LabelsFrame | None):
        self.scan, self.frame = scan, frame

    def __call__(self, rel: str, done):
        """``done`` (the image's Record, or a Skip) with its mask packed."""
        if not isinstance(done, Record):
            return done
        if done.orientation != 1 and self.frame is None:
            return done   # refuse_unframed names the row, with what to pass
        mask_rel = self.scan.masks[self.scan.places[rel]]
        where = f"{self.scan.labels_file}: {self.scan.rows.get(rel, 'the row')} ({rel}): mask {mask_rel}"
        path = os.path.join(self.scan.root, mask_rel)
        try:
            mask = read_png(read_file(path), where)
        except FileNotFoundError:
            raise TargetRefused(f"{where}: no such file; correct the labels file; nothing written") from None
        except OSError as exc:
            raise TargetRefused(f"{where}: cannot read ({exc.strerror}); nothing written") from None
        except MaskError as exc:
            raise TargetRefused(f"{exc}; nothing written") from None
        stored = self.frame is LabelsFrame.STORED and done.orientation != 1
        h, w = (int(v) for v in stored_sizes([done.orientation], [[done.height, done.width]])[0]) if stored \
            else (done.height, done.width)
        if mask.shape != (h, w):
            frame = (f" in the stored frame (before its EXIF orientation {done.orientation}, --labels-frame stored)"
                     if stored else "")
            raise TargetRefused(f"{where}: {mask.shape[1]}x{mask.shape[0]} (WxH), but its image is {w}x{h}"
                                f"{frame}: a mask is the size of its image; nothing written")
        if stored:
            mask = turned(mask, done.orientation)
        packed = PackedMask(encode(mask), tuple(values_of(mask).tolist()), 8 * mask.itemsize)
        return done._replace(mask=packed)


def is_outcome(job) -> bool:
    """Whether ``job`` is an image's outcome already (a Record or a Skip), not work still to do."""
    return isinstance(job, (Record, Skip))
