"""What the pack tests compare: a store's full contents, and an unfinished pack's journal,
read straight from the files (lmdb, json), not through the writer that made them."""
from __future__ import annotations

import io
import json
import os

import cv2
import lmdb
import numpy as np
import pytest

import feedline
from converters import pack, read_error_report
from feedline.dataset.format import LMDB_JOURNAL_PREFIX


def snapshot(out: str) -> dict:
    """Everything that must match: records, labels, sizes, paths, checksums, metadata but
    its time, the error report."""
    with feedline.open_dataset(out) as ds:
        recs = [(bytes(ds.read(i)), ds.label(i), ds.size(i), ds.path(i)) for i in range(len(ds))]
        sums = None if ds.checksums is None else ds.checksums.tolist()
        meta = {k: v for k, v in ds.meta.items() if k != "created"}
    report = out + ".errors.csv"
    return {"records": recs, "checksums": sums, "meta": meta,
            "errors": read_error_report(report) if os.path.exists(report) else None}


def committed(out: str) -> int:
    """Scanned files consumed by the last commit of the unfinished pack of ``out`` (0: none)."""
    if os.path.exists(out + ".partial.journal"):   # HDF5: a header line, then one JSON line per commit
        with open(out + ".partial.journal", "rb") as fh:
            raw = fh.read()
        lines = raw[:raw.rfind(b"\n") + 1].splitlines()[1:]  # complete lines only
        return json.loads(lines[-1])["consumed"] if lines else 0
    env = lmdb.open(out + ".partial", subdir=False, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            entries = [json.loads(v) for k, v in txn.cursor() if k.startswith(LMDB_JOURNAL_PREFIX)]
    finally:
        env.close()
    return max((e["consumed"] for e in entries), default=0)


MiB = 1 << 20


def noise_jpeg(path, side: int, seed: int, size: int | None = None) -> int:
    """A real JPEG of noise (barely compressible), padded with COM segments to exactly
    ``size`` bytes when given; returns its size."""
    rng = np.random.default_rng(seed)
    ok, buf = cv2.imencode(".jpg", rng.integers(0, 256, (side, side, 3), dtype=np.uint8),
                           [cv2.IMWRITE_JPEG_QUALITY, 90])
    data = buf.tobytes()
    if size is not None:
        pad = size - len(data)
        assert pad == 0 or pad >= 4, (size, len(data))
        segments = []
        while pad:
            n = min(pad, 65535 + 2)
            if 0 < pad - n < 4:
                n = pad - 4
            segments.append(b"\xff\xfe" + (n - 2).to_bytes(2, "big") + b"c" * (n - 4))
            pad -= n
        data = data[:2] + b"".join(segments) + data[2:]
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)
    return len(data)


def stored_as_sources(out: str, src: str) -> int:
    """Every record of ``out`` holds its source file's bytes (JPEGs are stored as they are)."""
    with feedline.open_dataset(out) as ds:
        for i in range(len(ds)):
            with open(os.path.join(src, ds.path(i)), "rb") as fh:
                assert bytes(ds.read(i)) == fh.read(), ds.path(i)
        return len(ds)


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> str:
    """Seven noise JPEGs of exactly 8 MiB + 1 bytes in all: a buffered copy takes two reads,
    the second of one byte."""
    root = tmp_path_factory.mktemp("big") / "src"
    sizes = [1_000_000] * 6 + [8 * MiB + 1 - 6_000_000]
    for k, size in enumerate(sizes):
        noise_jpeg(root / "c" / f"{k}.jpg", 900, seed=k, size=size)
    return str(root)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> str:
    """Photos, files that are converted (PNG, CMYK, EXIF-rotated) and bad ones, in two classes."""
    return mixed_folder(tmp_path_factory.mktemp("mixed") / "src", n=10, seed=8, converted="class_001",
                        bad=("class_000", "class_001"))


def mixed_folder(root, n: int, seed: int, converted: str, bad: tuple[str, str]) -> str:
    """``n`` photos in two classes, three files pack converts (PNG, CMYK, EXIF-rotated) in
    class ``converted``, an empty JPEG in class ``bad[0]`` and a text file named .png in ``bad[1]``."""
    import helpers_images as imgs
    from feedline.sample import make_photo_folder
    make_photo_folder(str(root), n=n, classes=2, seed=seed, sizes=[(96, 64), (64, 96)])
    for name in ("rgba.png", "cmyk.jpg", "rotated.jpg"):
        imgs.GOOD_BUILDERS[name](str(root / converted / name))
    (root / bad[0] / "empty.jpg").write_bytes(b"")
    (root / bad[1] / "text.png").write_text("hello")
    return str(root)


def interrupt_at(monkeypatch, src: str, k: int) -> None:
    """Reading the k-th file (in scan order) raises KeyboardInterrupt, as Ctrl-C would."""
    import converters.packer as packer
    from feedline.dataset.scan import scan_folder
    real, stop = packer.check_file, scan_folder(src).paths[k - 1]

    def flaky(root, rel, options):
        if rel == stop:
            raise KeyboardInterrupt
        return real(root, rel, options)
    monkeypatch.setattr(packer, "check_file", flaky)


def interrupt_after(monkeypatch, k: int) -> None:
    """The k-th file read, whatever the source (a folder, tars), raises KeyboardInterrupt."""
    import converters.packer as packer
    real, calls = packer.check_file, []

    def flaky(root, rel, options):
        calls.append(rel)
        if len(calls) == k:
            raise KeyboardInterrupt
        return real(root, rel, options)
    monkeypatch.setattr(packer, "check_file", flaky)


def report_fields(report) -> dict:
    fields = dict(vars(report))
    for name in ("seconds", "resumed_from", "out", "error_report"):
        fields.pop(name)
    return fields


def records_of(out: str) -> list[bytes]:
    with feedline.open_dataset(out) as ds:
        return [bytes(ds.read(i)) for i in range(len(ds))]


def interrupted(src: str, out: str, monkeypatch, k: int = 11) -> None:
    """Ctrl-C while reading the 11th file, with 9 files committed (3 chunks)."""
    with monkeypatch.context() as m:
        interrupt_at(m, src, k)
        with pytest.raises(KeyboardInterrupt):
            pack(src, out, commit_every=3, jobs=1)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def source_size(src: str, rel: str) -> int:
    return os.path.getsize(os.path.join(src, rel))


def feedline_format(ext: str):
    from converters import OutputFormat
    return OutputFormat({"h5": "hdf5"}.get(ext, ext))
