"""`feedline pack` run as a user runs it (a new process) imports only what the files need:
JPEGs stored as they are need no image library, an LMDB pack needs no h5py and no numpy,
and no pack needs torch, or tqdm without a terminal. Checked with `python -X importtime`,
whose report names every module the process imported; a folder holding a PNG (which is
converted) shows that the probe does see Pillow when a pack needs it."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from feedline.sample import make_photo_folder
from feedline.stores import open_dataset

ROOT = Path(__file__).resolve().parents[1]
IMAGE_LIBRARIES = ("PIL", "cv2", "torch", "torchvision", "tqdm")   # never for JPEGs stored as they are
_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \| ( *)(\S+)$")   # two spaces per level


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    root = tmp_path_factory.mktemp("startup") / "images"
    make_photo_folder(str(root), n=6, classes=2, seed=3, sizes=[(96, 72), (64, 80)])
    return root


def imported_by_pack(src: Path, out: Path, *args: str) -> dict[str, str]:
    """Run `python -X importtime -m feedline pack SRC OUT [ARGS]` in a fresh interpreter; returns
    {top-level package: the chain of imports that first brought it in}."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "feedline", "pack", str(src), str(out), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.exists() and "packed" in done.stdout
    # importtime prints each module after its imports, indented one more step than its importer.
    lines = [(len(m[1]) // 2, m[2]) for m in map(_LINE.match, done.stderr.splitlines()) if m]
    first: dict[str, str] = {}
    for k, (depth, name) in enumerate(lines):
        top = name.split(".")[0]
        if top in first:
            continue
        chain, want = [name], depth - 1
        for outer_depth, outer in lines[k + 1:]:
            if outer_depth == want:
                chain.append(outer)
                want -= 1
        first[top] = " <- ".join(chain)
    return first


def test_jpegs_to_lmdb_import_no_image_library_no_numpy_no_h5py(jpegs, tmp_path):
    imported = imported_by_pack(jpegs, tmp_path / "out.lmdb")
    assert "lmdb" in imported and "feedline" in imported   # the probe sees the pack's own imports
    unwanted = {name: imported[name] for name in (*IMAGE_LIBRARIES, "h5py", "numpy") if name in imported}
    assert unwanted == {}
    with open_dataset(str(tmp_path / "out.lmdb")) as store:
        assert len(store) == 6


def test_jpegs_with_a_path_label_csv_import_no_numpy(jpegs, tmp_path):
    """A plain path,label labels file needs no numpy (fields beyond label do)."""
    paths = sorted(p.relative_to(jpegs).as_posix() for p in jpegs.rglob("*.jpg"))
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\n" + "".join(f"{p},{'cat' if k % 2 else 'dog'}\n" for k, p in enumerate(paths)))
    imported = imported_by_pack(jpegs, tmp_path / "out.lmdb", "--labels", str(labels))
    assert "lmdb" in imported and "feedline" in imported
    unwanted = {name: imported[name] for name in (*IMAGE_LIBRARIES, "h5py", "numpy") if name in imported}
    assert unwanted == {}
    with open_dataset(str(tmp_path / "out.lmdb")) as store:
        assert len(store) == 6 and store.classes == ["cat", "dog"]


def test_jpegs_to_hdf5_import_no_image_library(jpegs, tmp_path):
    imported = imported_by_pack(jpegs, tmp_path / "out.h5")
    assert "h5py" in imported
    unwanted = {name: imported[name] for name in IMAGE_LIBRARIES if name in imported}
    assert unwanted == {}
    with open_dataset(str(tmp_path / "out.h5")) as store:
        assert len(store) == 6


def test_a_file_to_convert_brings_in_pillow(tmp_path):
    """The control: a PNG must be converted, so this pack imports Pillow (and the probe says so)."""
    from PIL import Image
    src = tmp_path / "images"
    make_photo_folder(str(src), n=2, classes=1, seed=3, sizes=[(64, 48)])
    jpeg = next(src.rglob("*.jpg"))
    Image.open(jpeg).save(jpeg.with_suffix(".png"))
    imported = imported_by_pack(src, tmp_path / "out.lmdb")
    assert "PIL" in imported and "converters.reencode" in imported["PIL"]
    with open_dataset(str(tmp_path / "out.lmdb")) as store:
        assert len(store) == 3
