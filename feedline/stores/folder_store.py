"""A plain image folder read as a store: no packing, no checks, files as they are."""
from __future__ import annotations

import logging
import os

import numpy as np
from PIL import Image

from ..core.errors import FeedlineError, StoreError
from ..dataset.format import Columns
from ..dataset.scan import log_problems, scan_folder
from ..dataset.targets import LABEL_ONLY, TargetColumns
from .base import Store

log = logging.getLogger(__name__)


class FolderStore(Store):
    """Scans the folder once at open (names only, no image is read). Sizes are read
    from the image headers on first use of ``size``/``sizes``. Packed files are the
    fast path; a folder is for trying feedline before packing."""

    kind = "folder"

    def __init__(self, root: str, labels_csv: str | None = None):
        try:
            scan = scan_folder(root, labels_csv)
            log_problems(scan.root, scan.problems)
        except StoreError:
            raise
        except FeedlineError as exc:  # no images, an unreadable labels file: not a usable store
            raise StoreError(str(exc)) from None
        self.filename = scan.root
        self.classes = scan.classes
        self.meta = {"format": "folder", "count": len(scan.paths), "classes": scan.classes}
        if scan.fields != LABEL_ONLY:
            self.meta["fields"], self.meta["class_lists"] = scan.fields, scan.class_lists
        self.columns = Columns.from_lists(scan.labels, np.full((len(scan.paths), 2), -1), scan.paths)
        if scan.targets is not None and scan.targets.fields:
            arrays = {"labels": self.columns.labels, **scan.targets.arrays}
            self._targets = TargetColumns(scan.fields, arrays, len(scan.paths), scan.class_lists)
        self._masks = scan.masks   # each record's mask file, relative to the folder (a labels file's mask column)
        self._sizes_known = np.zeros(len(scan.paths), dtype=bool)
        self._too_large: dict[int, str] = {}   # index -> Pillow's reason: read() refuses these

    def _file(self, index: int) -> str:
        return os.path.join(self.filename, self.columns.path(index))

    def read(self, index: int) -> bytes:
        i = self._check(index)
        path = self._file(i)
        self.size(i)   # its header, once: an image too large to decode is refused here, in one line
        if i in self._too_large:
            raise StoreError(f"{path}: too large to read from a folder ({self._too_large[i]}); pack the folder "
                             "with `feedline pack SRC OUT --max-side 2048` (huge JPEGs are decoded DCT-scaled) "
                             "and read OUT")
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except OSError as exc:
            raise StoreError(f"{path}: cannot read ({exc.strerror})") from None

    def read_mask(self, index: int) -> bytes:
        if self._masks is None:
            return super().read_mask(index)
        path = os.path.join(self.filename, self._masks[self._check(index)])
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except OSError as exc:
            raise StoreError(f"{path}: cannot read the mask ({exc.strerror})") from None

    def size(self, index: int) -> tuple[int, int]:
        i = self._check(index)
        if not self._sizes_known[i]:
            try:
                with Image.open(self._file(i)) as im:
                    w, h = im.size
            except Image.DecompressionBombError as exc:
                self._too_large[i] = str(exc).split(", could be")[0]   # "Image size (N pixels) exceeds limit of M pixels"
                w = h = 0
            except OSError as exc:
                # Unpacked files are unchecked: a bad one must fail when it is decoded, with
                # its index and path (or be substituted), not when a whole epoch is planned.
                log.debug("%s: cannot read the image header (%s); size (0, 0)", self._file(i), exc)
                w = h = 0
            self.columns.sizes[i] = (h, w)
            self._sizes_known[i] = True
        h, w = self.columns.sizes[i]
        return int(h), int(w)

    def byte_lengths(self) -> np.ndarray:
        lengths = np.zeros(len(self), dtype=np.int64)
        for i in range(len(self)):
            try:
                lengths[i] = os.path.getsize(self._file(i))
            except OSError as exc:
                raise StoreError(f"{self._file(i)}: cannot read ({exc.strerror})") from None
        return lengths

    @property
    def sizes(self) -> np.ndarray:
        for i in np.flatnonzero(~self._sizes_known):
            self.size(int(i))
        return self.columns.sizes
