"""Find the images of a folder and their labels, as torchvision's ImageFolder does.

One subfolder per class, labels = sorted class-folder names -> 0..K-1; a folder with
no subfolders is one class; a CSV of (relative path, label) is the alternative.
Hidden files and folders are skipped, symlinks are followed without loops, and the
order is sorted, so a scan is deterministic.
"""
from __future__ import annotations

import csv
import os
from dataclasses import dataclass

from .errors import FeedlineError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".gif")


@dataclass
class ScanResult:
    root: str
    paths: list[str]      # relative to root, '/'-separated, sorted
    labels: list[int]
    classes: list[str]


def is_image_name(name: str) -> bool:
    return not name.startswith(".") and name.lower().endswith(IMAGE_EXTENSIONS)


def _walk_images(top: str, rel: str = "") -> list[str]:
    """Relative paths of the image files under top, following symlinks without loops."""
    found: list[str] = []
    seen_dirs: set[tuple[int, int]] = set()

    def visit(directory: str, prefix: str) -> None:
        st = os.stat(directory)
        key = (st.st_dev, st.st_ino)
        if key in seen_dirs:
            return
        seen_dirs.add(key)
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except PermissionError:
            return
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                is_dir = entry.is_dir()  # follows symlinks
            except OSError:
                continue
            if is_dir:
                visit(entry.path, f"{prefix}{entry.name}/")
            elif is_image_name(entry.name) and (entry.is_file() or not os.path.exists(entry.path)):
                found.append(prefix + entry.name)

    visit(top, rel)
    return found


def _class_dirs(root: str) -> list[str]:
    names = []
    for entry in os.scandir(root):
        if not entry.name.startswith(".") and entry.is_dir():
            names.append(entry.name)
    return sorted(names)


def scan_folder(root: str, labels_csv: str | None = None) -> ScanResult:
    """Scan an image folder; FeedlineError when it is missing or holds no images."""
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        raise FeedlineError(f"{root}: no such folder")
    if labels_csv is not None:
        return _scan_with_csv(root, labels_csv)
    classes = _class_dirs(root)
    paths: list[str] = []
    labels: list[int] = []
    if classes:
        for label, name in enumerate(classes):
            for rel in _walk_images(os.path.join(root, name), f"{name}/"):
                paths.append(rel)
                labels.append(label)
        # Images lying next to the class folders belong to no class: ImageFolder ignores them too.
    else:
        paths = _walk_images(root)
        labels = [0] * len(paths)
        classes = [os.path.basename(root) or "images"]
    if not paths:
        raise FeedlineError(f"{root}: no images found (looked for {', '.join(IMAGE_EXTENSIONS)})")
    return ScanResult(root=root, paths=paths, labels=labels, classes=classes)


def _scan_with_csv(root: str, labels_csv: str) -> ScanResult:
    try:
        with open(labels_csv, newline="", encoding="utf-8") as fh:
            rows = [row for row in csv.reader(fh) if row and not row[0].startswith("#")]
    except OSError as exc:
        raise FeedlineError(f"{labels_csv}: cannot read the labels file ({exc.strerror})") from None
    if rows and len(rows[0]) >= 2 and rows[0][0].strip().lower() in ("path", "file", "filename"):
        rows = rows[1:]
    pairs = []
    for line, row in enumerate(rows, 1):
        if len(row) < 2:
            raise FeedlineError(f"{labels_csv}: row {line} needs two columns: relative path, label")
        pairs.append((row[0].strip().replace(os.sep, "/"), row[1].strip()))
    if not pairs:
        raise FeedlineError(f"{labels_csv}: no rows")
    names = [label for _, label in pairs]
    if all(n.lstrip("-").isdigit() for n in names):
        ints = [int(n) for n in names]
        if min(ints) < 0:
            raise FeedlineError(f"{labels_csv}: labels must be >= 0")
        classes = [str(i) for i in range(max(ints) + 1)]
    else:
        classes = sorted(set(names))
        index = {name: i for i, name in enumerate(classes)}
        ints = [index[n] for n in names]
    pairs_sorted = sorted(zip((p for p, _ in pairs), ints))
    return ScanResult(root=root, paths=[p for p, _ in pairs_sorted],
                      labels=[lab for _, lab in pairs_sorted], classes=classes)
