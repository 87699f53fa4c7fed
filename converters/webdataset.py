"""WebDataset tar shards as a pack's input: `feedline pack 'data/train-*.tar' OUT`.

A WebDataset sample is the files of one tar that share a key (the name up to its first
dot): an image (``KEY.jpg``, ``.jpeg`` or ``.png``) and its label, ``KEY.cls`` (a class
number) or ``KEY.json`` (``{"label": ..}``, ``{"cls": ..}`` or the labels file's other fields:
labels, target, boxes, keypoints). The samples are written out once into a staging folder (the tar's name as a
subfolder, so keys of different tars cannot collide) with a JSON Lines labels file, which
the ordinary pack then reads: every check, conversion and report applies unchanged. The
staging folder's place depends on OUT alone, so ``--resume`` finds the same files.
"""
from __future__ import annotations

import glob
import json
import logging
import os
import posixpath
import tarfile

from feedline.errors import FeedlineError

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
LABELS_NAME = "labels.jsonl"


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


def unpack_tars(paths: list[str], staging: str) -> tuple[str, str]:
    """The samples of ``paths`` as (image folder, JSON Lines labels file) under ``staging``."""
    os.makedirs(staging, exist_ok=True)
    rows, unlabeled = [], 0
    for path in paths:
        folder = os.path.splitext(os.path.basename(path))[0]
        samples = _samples(path)
        for key in sorted(samples):
            files = samples[key]
            image = next((s for s in IMAGE_SUFFIXES if s in files), None)
            if image is None:
                continue
            row = _label(files, f"{path}:{key}")
            if row is None:
                unlabeled += 1
                continue
            rel = posixpath.join(folder, key.replace("/", "_") + image)
            target = os.path.join(staging, "images", rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as fh:
                fh.write(files[image])
            rows.append({"path": rel, **row})
    if not rows:
        raise FeedlineError(f"{paths[0]}{' ...' if len(paths) > 1 else ''}: no labelled images in the tar files "
                            f"(looked for KEY{'/'.join(IMAGE_SUFFIXES)} with KEY.cls or KEY.json beside it)")
    if unlabeled:
        log.warning("%d image(s) in the tar files have no KEY.cls or KEY.json beside them: not packed", unlabeled)
    labels = os.path.join(staging, LABELS_NAME)
    with open(labels, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    return os.path.join(staging, "images"), labels


def _samples(path: str) -> dict[str, dict[str, bytes]]:
    """{key: {".jpg": bytes, ".cls": bytes, ...}} of one tar, read in one pass."""
    samples: dict[str, dict[str, bytes]] = {}
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                directory, base = posixpath.split(member.name)
                stem, dot, rest = base.partition(".")
                if not dot:
                    continue
                key = posixpath.join(directory, stem)
                suffix = "." + rest.lower()
                data = tar.extractfile(member).read()
                samples.setdefault(key, {})[suffix] = data
    except (tarfile.TarError, OSError) as exc:
        raise FeedlineError(f"{path}: not a readable tar file ({exc})") from None
    return samples


def _label(files: dict[str, bytes], where: str) -> dict | None:
    if ".cls" in files:
        text = files[".cls"].decode("utf-8", "replace").strip()
        try:
            return {"label": int(text)}
        except ValueError:
            return {"label": text}
    if ".json" in files:
        try:
            meta = json.loads(files[".json"])
        except ValueError as exc:
            raise FeedlineError(f"{where}.json: not JSON ({exc})") from None
        if not isinstance(meta, dict):
            return {"label": meta} if isinstance(meta, (int, str)) else None
        from feedline.fields import FIELD_NAMES   # the labels file's fields, by their own names
        row = {k: meta[k] for k in FIELD_NAMES if k in meta}
        return row or ({"label": meta["cls"]} if "cls" in meta else None)
    return None
