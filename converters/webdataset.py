"""WebDataset tar shards as a pack's input: `feedline pack 'data/train-*.tar' OUT`.

A WebDataset sample is the files of one tar that share a key (the member's name up to the
first dot of its base name): an image (``KEY.jpg``, ``.jpeg`` or ``.png``, in any case, such
as ImageNet's ``.JPEG``) and its targets: ``KEY.cls`` (the label: a class number or name)
and/or ``KEY.json`` (``{"label": ..}`` or ``{"cls": ..}``, and the labels file's other
fields: labels, target, boxes, keypoints; a ``KEY.cls`` beside it gives the label). The
samples are written out once into a staging folder (the tar's name as a subfolder, so keys of
different tars cannot collide; a key's folders as folders) with a JSON Lines labels file,
which the ordinary pack then reads: every check, conversion and report applies unchanged, and
its errors name the tar and the sample (`Staged.explain`). The staging folder's place depends
on OUT alone, so ``--resume`` finds the same files.
"""
from __future__ import annotations

import glob
import json
import logging
import os
import posixpath
import re
import shutil
import tarfile
from dataclasses import dataclass

from feedline.core.errors import FeedlineError

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
LABELS_NAME = "labels.jsonl"


@dataclass(frozen=True)
class Staged:
    """The tars' samples as an image folder and a labels file, one line per image."""

    folder: str
    labels: str
    origins: list[tuple[str, str]]   # line k + 1 of the labels file: (tar, sample key)

    def where(self, line: int) -> str:
        tar, key = self.origins[line - 1]
        return f"{tar}: sample {key}"

    def explain(self, exc: FeedlineError) -> FeedlineError:
        """``exc`` in the tars' terms when it speaks of the staged labels file's lines: each
        "line N" becomes "TAR: sample KEY" (the file the user can correct)."""
        text = str(exc)
        if self.labels not in text:
            return exc
        text = re.sub(r"\bline (\d+)", lambda m: self.where(int(m[1])), text.replace(f"{self.labels}: ", ""))
        return type(exc)(text)   # FeedlineError, PackError, TargetRefused: built from the message alone


def tar_inputs(src) -> list[str] | None:
    """The tar files ``src`` names (a .tar path, a glob of them, or a list), or None when
    ``src`` is not tar input (an image folder)."""
    if isinstance(src, (list, tuple)):
        paths = [os.fspath(p) for p in src]
    else:
        text = os.fspath(src)
        if not text.endswith(".tar") or os.path.isdir(text):
            return None
        paths = sorted(glob.glob(text)) if any(c in text for c in "*?[") else [text]
        if not paths:
            raise FeedlineError(f"{text}: the pattern matches no .tar file")
    for path in paths:
        if not path.endswith(".tar"):
            raise FeedlineError(f"{path}: not a .tar file; give WebDataset .tar shards, or an image folder")
        if not os.path.isfile(path):
            raise FeedlineError(f"{path}: no such file")
    names = [os.path.basename(p) for p in paths]
    if len(set(names)) < len(names):
        raise FeedlineError(f"{paths[0]}: two tar files of the same name; each shard's name must be its own")
    return paths


def unpack_tars(paths: list[str], staging: str) -> Staged:
    """The labelled samples of ``paths`` as an image folder and a JSON Lines labels file under
    ``staging``. Images staged by an earlier run are removed first: a pack takes the tars it is
    given, no more (a resumed one finds the same bytes again)."""
    images = os.path.join(staging, "images")
    shutil.rmtree(images, ignore_errors=True)
    rows, origins, unlabelled = [], [], []
    for path in paths:
        folder = os.path.splitext(os.path.basename(path))[0]
        samples = _samples(path)
        for key in sorted(samples):
            files = samples[key]
            image = next((s for s in IMAGE_SUFFIXES if s in files), None)
            if image is None:
                continue
            row = _targets(files, path, key)
            if row is None:
                unlabelled.append(f"{path}: sample {key}")
                continue
            written, data = files[image]
            rel = posixpath.join(folder, key + written)   # the suffix as written: ImageNet's .JPEG stays
            target = os.path.join(images, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as fh:
                fh.write(data)
            rows.append({"path": rel, **row})
            origins.append((path, key))
    if not rows:
        raise FeedlineError(f"{paths[0]}{' ...' if len(paths) > 1 else ''}: no labelled images in the tar files "
                            f"(looked for KEY{'/'.join(IMAGE_SUFFIXES)} with KEY.cls or KEY.json beside it)")
    _check_same_fields(rows, origins)
    if unlabelled:
        log.warning("%d image(s) in the tar files have no label (KEY.cls, or a KEY.json naming %s): not packed; "
                    "the first: %s", len(unlabelled), _field_words(), unlabelled[0])
    labels = os.path.join(staging, LABELS_NAME)
    with open(labels, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    return Staged(images, labels, origins)


def _samples(path: str) -> dict[str, dict[str, tuple[str, bytes]]]:
    """{key: {".jpg": (".JPG" as written, bytes), ".cls": ...}} of one tar, read in one pass;
    suffixes compared in lower case."""
    samples: dict[str, dict[str, tuple[str, bytes]]] = {}
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                directory, base = posixpath.split(member.name)
                stem, dot, rest = base.partition(".")
                if not (dot and stem):   # no suffix, or a hidden file (._a.jpg): not a sample's part
                    continue
                parts = [p for p in directory.split("/") if p not in ("", ".")]
                if ".." in parts:
                    raise FeedlineError(f"{path}: member {member.name} lies outside the tar's folder (a '..' in "
                                        "its name); write the shard with names relative to its root")
                data = tar.extractfile(member).read()
                samples.setdefault("/".join([*parts, stem]), {})["." + rest.lower()] = ("." + rest, data)
    except (tarfile.TarError, OSError) as exc:
        raise FeedlineError(f"{path}: not a readable tar file ({exc})") from None
    return samples


def _targets(files: dict[str, tuple[str, bytes]], path: str, key: str) -> dict | None:
    """The sample's labels-file fields: the label from KEY.cls, else KEY.json's "label" or
    "cls"; the other fields from KEY.json. None when it has neither."""
    from feedline.fields import FIELD_NAMES, KINDS   # the labels file's fields, by their own names
    row: dict = {}
    if ".json" in files:
        try:
            meta = json.loads(files[".json"][1])
        except ValueError as exc:
            raise FeedlineError(f"{path}: {key}.json is not JSON ({exc})") from None
        if isinstance(meta, dict):
            row = {k: meta[k] for k in FIELD_NAMES if k in meta and not KINDS[k].files}   # a mask: a file
            if "label" not in row and "cls" in meta:
                row["label"] = meta["cls"]
        elif isinstance(meta, (int, str)) and not isinstance(meta, bool):
            row = {"label": meta}
    if ".cls" in files:   # text, as a labels CSV's cell: "7" is class 7, "tench" a name
        try:
            row["label"] = files[".cls"][1].decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            raise FeedlineError(f"{path}: {key}.cls is not UTF-8 text ({exc})") from None
    return row or None


def _check_same_fields(rows: list[dict], origins: list[tuple[str, str]]) -> None:
    first = sorted(set(rows[0]) - {"path"})
    for row, (tar, key) in zip(rows, origins):
        mine = sorted(set(row) - {"path"})
        if mine != first:
            raise FeedlineError(f"{tar}: sample {key} has {', '.join(mine)}, but sample {origins[0][1]} "
                                f"({os.path.basename(origins[0][0])}) has {', '.join(first)}: every sample needs "
                                "the same fields (KEY.cls gives a label; KEY.json the fields it names)")


def _field_words() -> str:
    from feedline.fields import FIELD_NAMES, KINDS
    names = ["label", "cls", *(n for n in FIELD_NAMES if n != "label" and not KINDS[n].files)]
    return ", ".join(names[:-1]) + " or " + names[-1]
