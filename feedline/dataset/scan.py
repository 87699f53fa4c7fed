"""Find the images of a folder and their labels, as torchvision's ImageFolder does.

One subfolder per class, labels = sorted class-folder names -> 0..K-1; a folder with
no subfolders is one class; a labels file (CSV or JSON Lines: see `labels_file`) is the
alternative, and may give other fields (several labels, numeric targets, boxes). Hidden
files and folders are skipped and the order is sorted, so a scan is deterministic.

Symlinks: a file link is an image like any other, found once under its own path. A
folder link is followed only to a folder not already on the walk: the folders on the
way to it (a link to one of them is a loop, e.g. ``zbad/loop_link -> ..``) and every
folder found without following links. Those links are not followed and are listed in
``ScanResult.problems``, which the packer writes to OUT.errors.csv.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple

from ..core.errors import FeedlineError
from ..fields import LABEL_ONLY, class_fields

if TYPE_CHECKING:
    from .targets import TargetColumns

log = logging.getLogger(__name__)

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".gif")

# Reasons of ScanResult.problems; the packer's SkipReason has the same values.
SYMLINK_LOOP = "symlink-loop"           # a folder link to a folder on its own path
SYMLINK_REPEAT = "symlink-repeat"       # a folder link to a folder the walk reaches anyway
NOT_IN_LABELS = "not-in-labels-csv"     # an image in the folder that the labels CSV does not list
NOT_IN_JSONL = "not-in-labels-jsonl"    # an image in the folder that the JSON Lines labels file does not list
MISSING = "missing"                     # a labels CSV row whose file does not exist
NO_CLASS = "no-class"                   # an image beside the class folders: in no class


class Unscanned(NamedTuple):
    """Something the scan found and will not hand on: a file or a folder link."""

    path: str       # relative to the root, '/'-separated
    reason: str     # one of the reasons above
    detail: str


@dataclass
class ScanResult:
    root: str
    paths: list[str]      # relative to root, '/'-separated, sorted (or shuffled: see `shuffled`)
    labels: list[int]     # the label field; -1 each when the labels file has no label column
    classes: list[str]
    problems: list[Unscanned] = field(default_factory=list)
    fields: dict[str, dict] = field(default_factory=lambda: dict(LABEL_ONLY))   # see `feedline.fields`
    targets: TargetColumns | None = None    # the fields other than label, in the order of paths
    class_lists: dict[str, list[str]] = field(default_factory=dict)   # each field's own classes
    labels_file: str | None = None          # where the labels came from, for messages
    rows: dict[str, str] = field(default_factory=dict)   # path -> "row 7" / "line 7" of the labels file
    masks: list[str] | None = None          # each file's mask (relative to root), in the order of paths

    def __post_init__(self):
        if not self.class_lists:   # a class-folder scan: the label's list
            self.class_lists = {name: list(self.classes) for name in class_fields(self.fields)}

    @cached_property
    def places(self) -> dict[str, int]:
        """Each path's place in ``paths``."""
        return {p: i for i, p in enumerate(self.paths)}

    def part(self, indices) -> "ScanResult":
        """The files ``indices`` (a shuffle, a shard), with their labels and targets."""
        idx = list(indices)
        return replace(self, paths=[self.paths[i] for i in idx], labels=[self.labels[i] for i in idx],
                       targets=None if self.targets is None else self.targets.take(idx),
                       masks=None if self.masks is None else [self.masks[i] for i in idx])


def shuffled(scan: ScanResult, seed: int | None) -> ScanResult:
    """``scan`` with its files in a random order from ``seed`` (the same order for the same
    seed and files), or ``scan`` itself for None. Packing in a shuffled order puts records of
    every class next to each other on disk, which quasi-random reading needs: it reads
    neighbours together, and neighbours of one class make batches of few classes."""
    if seed is None:
        return scan
    import random
    order = list(range(len(scan.paths)))
    random.Random(seed).shuffle(order)
    return scan.part(order)


def is_image_name(name: str) -> bool:
    return not name.startswith(".") and name.lower().endswith(IMAGE_EXTENSIONS)


def _key(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


class _Walk:
    """Image files under one root, links followed as the module docstring says.

    Two phases, so that a folder reached both by its real path and through a link is
    found under its real path whichever sorts first: the real folders first, then the
    folder links in sorted order (and the links found behind those)."""

    def __init__(self):
        self.visited: dict[tuple[int, int], str] = {}   # folder -> the relative path it was found at
        self.links: list[tuple[str, str, tuple]] = []   # (path, relative prefix, keys of the folders above)
        self.problems: list[Unscanned] = []
        self.found: list[str] = []

    def visit(self, directory: str, prefix: str, above: tuple) -> None:
        rel = prefix.rstrip("/")
        try:
            st = os.stat(directory)
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:  # an unreadable folder or a broken link: nothing in it can be packed
            log.warning("%s: cannot list the folder (%s); skipped", directory, exc.strerror)
            return
        key = _key(st)
        if key in above or key in self.visited:
            self._refuse(directory, rel, key in above)
            return
        self.visited[key] = rel
        above = (*above, key)
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                is_dir = entry.is_dir()  # follows symlinks
            except OSError:
                continue
            if is_dir and entry.is_symlink():
                self.links.append((entry.path, f"{prefix}{entry.name}/", above))
            elif is_dir:
                self.visit(entry.path, f"{prefix}{entry.name}/", above)
            elif is_image_name(entry.name) and (entry.is_file() or not os.path.exists(entry.path)):
                self.found.append(prefix + entry.name)  # a broken link too: the packer reports it unreadable

    def follow_links(self) -> None:
        while self.links:
            self.links.sort(key=lambda link: _sort_key(link[1]))
            path, prefix, above = self.links.pop(0)
            self.visit(path, prefix, above)

    def _refuse(self, directory: str, rel: str, loop: bool) -> None:
        target = f" -> {os.readlink(directory)}" if os.path.islink(directory) else ""
        if loop:
            self.problems.append(Unscanned(rel, SYMLINK_LOOP, f"symlink loop: {rel}{target} points to a "
                                           "folder above it; not followed"))
        else:
            where = self.visited.get(_key(os.stat(directory))) or "the top folder"
            self.problems.append(Unscanned(rel, SYMLINK_REPEAT, f"{rel}{target} is the folder {where}, "
                                           "which is packed already; not followed"))

    def sorted_found(self) -> list[str]:
        return sorted(self.found, key=_sort_key)  # nearly sorted already: linear time


def _sort_key(rel: str) -> str:
    # Folder by folder ("a/b" before "a-c"): NUL sorts before every character of a name.
    return rel.replace("/", "\0")


def _class_dirs(root: str) -> list[str]:
    names = []
    for entry in os.scandir(root):
        if not entry.name.startswith(".") and entry.is_dir():
            names.append(entry.name)
    return sorted(names)


def scan_folder(root: str, labels_csv: str | None = None) -> ScanResult:
    """Scan an image folder; FeedlineError when it is missing or holds no images. What it does
    not hand on is in ``problems`` (see `log_problems`)."""
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        if os.path.exists(root):
            raise FeedlineError(f"{root} is a file, not a folder: give the image folder (one subfolder per "
                                "class), or --labels FILE.csv with the folder its paths are relative to")
        raise FeedlineError(f"{root}: no such folder")
    if labels_csv is not None:
        result = _scan_with_csv(root, labels_csv)
    else:
        result = _scan_classes(root)
    if not result.paths:
        raise FeedlineError(f"{root}: no images found (looked for {', '.join(IMAGE_EXTENSIONS)})")
    return result


def all_images(root: str) -> tuple[list[str], list[Unscanned]]:
    """Every image file under ``root``, in class folders or not, and the links not followed."""
    walk = _Walk()
    walk.visit(root, "", ())
    walk.follow_links()
    return walk.sorted_found(), walk.problems


def _scan_classes(root: str) -> ScanResult:
    names = _class_dirs(root)
    if not names:
        paths, problems = all_images(root)
        return ScanResult(root, paths, [0] * len(paths), [os.path.basename(root) or "images"], problems)
    walk = _Walk()
    top = _key(os.stat(root))
    walk.visited[top] = ""
    for name in names:
        path = os.path.join(root, name)
        if os.path.islink(path):
            walk.links.append((path, f"{name}/", (top,)))
        else:
            walk.visit(path, f"{name}/", (top,))
    walk.follow_links()
    # A class folder that is a link not followed (a loop, or another class again) is no class.
    entered = set(walk.visited.values())
    classes = [n for n in names if n in entered or not os.path.islink(os.path.join(root, n))]
    label_of = {name: label for label, name in enumerate(classes)}
    paths = walk.sorted_found()
    # Images lying next to the class folders belong to no class (ImageFolder ignores them
    # too): listed, so that they are not lost without a word.
    strays = [Unscanned(name, NO_CLASS, "an image beside the class folders belongs to no class; not packed "
                        "(move it into a class folder)") for name in _top_images(root)]
    return ScanResult(root, paths, [label_of[p.split("/", 1)[0]] for p in paths], classes,
                      walk.problems + strays)


def _top_images(root: str) -> list[str]:
    return sorted(e.name for e in os.scandir(root) if is_image_name(e.name) and not e.is_dir())


def _scan_with_csv(root: str, labels_file: str) -> ScanResult:
    """The folder's images labelled by the labels file; unlisted images and missing files reported."""
    from .labels_file import read_labels_file   # numpy: only for fields beyond label
    table = read_labels_file(labels_file)
    images, problems = all_images(root)
    on_disk = set(images)
    name = os.path.basename(labels_file)
    paths = []
    for rel in sorted(table.rows, key=_sort_key):
        # A listed file the walk did not take (another extension, hidden) counts if it exists.
        if rel in on_disk or os.path.isfile(os.path.join(root, rel)):
            paths.append(rel)
        else:
            problems.append(Unscanned(rel, MISSING, f"listed in {name} ({table.unit} {table.rows[rel]}), but "
                                      "there is no such file in the folder"))
    unlisted = NOT_IN_LABELS if table.unit == "row" else NOT_IN_JSONL
    masks = set(table.masks or ())   # the masks lie among the images, often: they are no unlisted images
    problems += [Unscanned(rel, unlisted, f"in the folder, but {name} has no {table.unit} for it; not packed")
                 for rel in images if rel not in table.rows and rel not in masks]
    places = [table.position[p] for p in paths]
    return ScanResult(root, paths, [table.labels[k] for k in places], table.classes, problems,
                      fields=table.fields, targets=None if table.targets is None else table.targets.take(places),
                      class_lists=table.class_lists, labels_file=labels_file,
                      rows={rel: f"{table.unit} {line}" for rel, line in table.rows.items()},
                      masks=None if table.masks is None else [table.masks[k] for k in places])


def log_problems(root: str, problems: list[Unscanned]) -> None:
    """One warning per reason for what a scan will not hand on: for readers of a folder (a
    FolderStore); a pack reports them itself, once, in its summary and OUT.errors.csv."""
    by_reason: dict[str, list[str]] = {}
    for p in problems:
        by_reason.setdefault(p.reason, []).append(p.path)
    for reason, paths in by_reason.items():
        shown = ", ".join(paths[:3]) + (", ..." if len(paths) > 3 else "")
        log.warning("%s: %d %s (%s) left out: %s", root, len(paths),
                    "folder link(s)" if reason.startswith("symlink") else "file(s)", reason, shown)
