"""Pack an image folder into one LMDB or HDF5 file that feedline streams from.

    from converters import pack
    report = pack("images/", "train.lmdb", quality=95, on_error="skip")

Every record decodes to an 8-bit RGB or gray image with libjpeg-turbo, nvJPEG and
DALI. JPEGs that already qualify (baseline or progressive, 8-bit, YCbCr or gray,
no EXIF rotation) are stored byte for byte after a header check, without being
decoded, so packing costs about what copying the files costs; damage inside their
entropy-coded data is found by `feedline verify`, or here with ``check="decode"``.
Everything else (PNG, WebP, BMP, TIFF, GIF's first frame, CMYK/YCCK, 12-bit,
lossless or arithmetic JPEG, 16-bit, palette, alpha composited on white, EXIF
orientation applied) is converted once to a baseline JPEG. Every record gets an
xxh3_64 checksum of its bytes. ``shard_records``, ``shard_bytes`` or ``num_shards``
write shards plus an index that names them (see `shards`).

Bad files are skipped and listed in OUT.errors.csv (CSV: path, reason, detail), or
stop the pack with ``on_error="fail"``. The output appears at OUT only when it is
complete; an interrupted pack continues with ``resume=True``.
"""
from __future__ import annotations

import dataclasses
import os

from feedline.core.errors import FeedlineError, PackError

from .options import OnError, OutputFormat, PackOptions
from .report import PackReport, Skip, SkipReason, read_error_report


def pack(src: str | os.PathLike, out: str | os.PathLike, options: PackOptions | None = None,
         **kw) -> PackReport:
    """Pack the image folder ``src`` into ``out`` (.lmdb, .h5 or .hdf5).

    ``options`` and/or keyword arguments (the fields of PackOptions, which win).
    Raises FeedlineError when SRC is missing or holds no images, PackError when
    OUT exists without ``overwrite``, when a bad file stops the pack under
    ``on_error="fail"``, when no file can be packed, or when writing fails.
    """
    if options is None:
        options = PackOptions(**kw)
    elif kw:
        options = dataclasses.replace(options, **kw)
    from feedline.dataset.urls import check_url, url_scheme
    if not isinstance(src, (list, tuple)) and url_scheme(src):
        check_url(src)
        raise PackError(f"{src}: pack reads a local image folder (or local WebDataset .tar files); "
                        "copy the images to a local disk first")
    from .webdataset import tar_inputs
    tars = tar_inputs(src)
    if tars is not None:
        return _pack_tars(tars, out, options)
    if url_scheme(out):
        check_url(out)
        from .upload import pack_to_bucket
        return pack_to_bucket(src, os.fspath(out), options)
    if options.sharded:
        from .shards import pack_sharded
        return pack_sharded(src, out, options)
    from .packer import pack as _pack  # a module named "pack" would shadow this function
    return _pack(src, out, options)


def _pack_tars(tars: list[str], out, options: PackOptions) -> PackReport:
    """WebDataset tar shards: unpacked into a staging folder beside OUT (or under the cache
    for a bucket), packed as a folder with its labels file, the staging folder removed."""
    import hashlib
    import shutil

    from feedline.stores import from_environment
    from feedline.dataset.urls import url_scheme

    from .webdataset import unpack_tars
    if options.labels_csv is not None:
        raise PackError("WebDataset tar input carries its labels (KEY.cls or KEY.json beside each image); "
                        "leave out --labels")
    out = os.fspath(out)
    if url_scheme(out):
        staging = os.path.join(from_environment().cache_root, "upload",
                               "tars-" + hashlib.sha256(out.encode()).hexdigest()[:16])
    else:
        staging = os.path.abspath(out) + ".tars"
    staged = unpack_tars(tars, staging)
    try:
        report = pack(staged.folder, out, dataclasses.replace(options, labels_csv=staged.labels))
    except FeedlineError as exc:   # a labels-file error: said of the tar and sample, not the staged line
        explained = staged.explain(exc)
        if explained is exc:
            raise
        raise explained from None
    shutil.rmtree(staging, ignore_errors=True)
    return report


def join_shards(out: str | os.PathLike) -> str:
    """Write OUT.shards.json for the complete shards OUT-NNNNN-of-NNNNN.EXT next to ``out``
    (packed on one machine or on several, with --shard-index); returns its path.
    PackError/StoreError when a shard is missing or repeated, or the shards disagree."""
    from feedline.dataset.urls import check_url, url_scheme
    if url_scheme(out):
        check_url(out)
        raise PackError(f"{out}: --join writes a local index; `feedline pack SRC {out} --num-shards N` "
                        "uploads a data set with its index")
    from .shards import join
    return join(out)


__all__ = ["pack", "join_shards", "PackOptions", "PackReport", "OutputFormat", "OnError", "Skip", "SkipReason",
           "read_error_report"]
