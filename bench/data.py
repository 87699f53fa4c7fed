"""The data a benchmark runs on: a packed file and the image folder it holds, both cached.

``DATA`` may be a packed file (.lmdb / .h5), an image folder, or nothing: then a
realistic set of photo-like JPEGs is generated from the photos feedline ships
(`feedline.sample`) into ``CACHE/bench-photos-N`` and packed next to it. A folder is
packed into the cache; a packed file is unpacked into the cache (one class folder per
label), so the folder-based baselines and FeedLoader read the same JPEG bytes.
Each cache entry is written under a temporary name and renamed when complete.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# Inside the repository (ignored by git): a benchmark writes nothing outside it or a temp folder.
DEFAULT_CACHE = Path(__file__).resolve().parent.parent / ".cache"


@dataclass(frozen=True)
class BenchData:
    folder: Path | None   # ImageFolder layout: one subfolder per class
    packed: Path | None   # a feedline store (LMDB or HDF5)
    images: int
    source: str           # what it was made from, for the JSON

    def to_dict(self) -> dict:
        return {"folder": str(self.folder) if self.folder else None,
                "packed": str(self.packed) if self.packed else None,
                "images": self.images, "source": self.source}


def cache_root(cache_dir: str | os.PathLike | None) -> Path:
    return Path(cache_dir if cache_dir is not None else DEFAULT_CACHE).expanduser()


def prepare_data(data: str | os.PathLike | None = None, n: int = 2000, *,
                 cache_dir: str | os.PathLike | None = None, folder: bool = True,
                 packed: bool = True, seed: int = 0, sizes=None) -> BenchData:
    """The folder and/or packed file for ``data`` (see the module docstring); ``n`` and
    ``sizes`` apply only when generating."""
    from feedline.stores import open_dataset
    cache = cache_root(cache_dir)
    if data is None:
        tag = f"bench-photos-{n}" + (f"-seed{seed}" if seed else "") + ("" if sizes is None else "-small")
        root = cache / tag
        images = generated_folder(root / "images", n, seed, sizes)
        out = packed_file(images, root / "train.lmdb") if packed else None
        return BenchData(images, out, n, f"generated: {n} photo-like JPEGs (feedline.sample, seed {seed})")
    data = Path(data).expanduser().resolve()
    if data.is_dir():
        with open_dataset(data) as store:
            count = len(store)
        out = packed_file(data, cache / "packed" / f"{cache_key(data)}.lmdb") if packed else None
        return BenchData(data, out, count, f"folder {data}")
    with open_dataset(data) as store:
        count = len(store)
        unpacked = unpacked_folder(store, cache / "unpacked" / cache_key(data)) if folder else None
    return BenchData(unpacked, data, count, f"packed file {data}")


def generated_folder(out: Path, n: int, seed: int = 0, sizes=None) -> Path:
    """``n`` photo-like JPEGs in ``out`` (generated once, ~20 ms each)."""
    if out.is_dir():
        return out
    from feedline.sample import SIZES, make_photo_folder
    log.info("generating %d photo-like JPEGs into %s (once; ~20 ms each)", n, out)
    tmp = _fresh_tmp(out)
    make_photo_folder(str(tmp), n=n, classes=10, seed=seed, sizes=sizes or SIZES)
    _publish(tmp, out)
    return out


def packed_file(folder: Path, out: Path) -> Path:
    """``folder`` packed into the LMDB file ``out`` (once)."""
    if out.is_file():
        return out
    from converters import pack
    log.info("packing %s into %s (once)", folder, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pack(str(folder), str(out), overwrite=True)  # pack itself writes OUT only when complete
    return out


def unpacked_folder(store, out: Path) -> Path:
    """The records of ``store`` as files ``out/class_LLLLL/RRRRRRRR.EXT`` (once): the
    folder-based baselines read the very bytes FeedLoader reads."""
    if out.is_dir():
        return out
    log.info("unpacking %s into %s (once)", store.filename, out)
    tmp = _fresh_tmp(out)
    for i in range(len(store)):
        data = bytes(memoryview(store.read(i)))
        ext = os.path.splitext(store.path(i))[1].lower() or ".jpg"
        folder = tmp / f"class_{store.label(i):05d}"
        folder.mkdir(exist_ok=True)
        (folder / f"{i:08d}{ext}").write_bytes(data)
    _publish(tmp, out)
    return out


def read_encoded(data: BenchData, n: int | None = None) -> list[bytes]:
    """The encoded bytes of ``n`` records spread evenly over the data set (all when None,
    in record order), from the packed file if there is one, else from the folder."""
    from feedline.stores import open_dataset
    with open_dataset(data.packed or data.folder) as store:
        total = len(store)
        if n is None or n >= total:
            indices = range(total)
        else:   # evenly spaced: a sorted folder's first records are all of one class
            indices = sorted({round(i * (total - 1) / max(n - 1, 1)) for i in range(n)})
        return [bytes(memoryview(store.read(i))) for i in indices]


def cache_key(path: Path) -> str:
    """A cache key for a user's file or folder: its path, size and modification time."""
    st = path.stat()
    text = f"{path}|{st.st_size}|{st.st_mtime_ns}"
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
        text += f"|{len(files)}|{sum(p.stat().st_size for p in files)}"
    return f"{path.name}-{hashlib.sha1(text.encode()).hexdigest()[:12]}"


def _fresh_tmp(out: Path) -> Path:
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def _publish(tmp: Path, out: Path) -> None:
    try:
        os.rename(tmp, out)
    except OSError:  # another run published it first
        if not out.is_dir():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
