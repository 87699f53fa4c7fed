"""Room on the output's filesystem: what a pack needs, what is free, and what to say
when the disk fills anyway.

The estimate is made before anything is written, from the sizes of the input files
still to pack plus each format's overhead (LMDB rounds each large value up to whole
4 KiB pages; both keep a resume journal and the columns). A full disk while writing
shows as ENOSPC or EDQUOT from write(), or as EIO ("Input/output error") from LMDB,
which reports a short write to its file that way: with little space left on the
filesystem, that EIO is a full disk too.
"""
from __future__ import annotations

import errno
import os
from typing import NamedTuple

from feedline.core.errors import DiskFullError, PackError

_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_SPACE_WORDS = ("no space left", "disk quota exceeded", "file too large")
_NEARLY_FULL = 64 << 20          # an EIO with less free than this is taken for a full disk
LMDB_PAGE = 4096
_PER_RECORD = {"lmdb": 96, "hdf5": 64}   # journal entry and columns, besides the path's bytes
_SAMPLE = 1000                   # files looked up first: enough when they show a wide margin
_FIXED = 256 << 10               # metadata, B-tree roots, HDF5 superblock and objects
# --layout grid stores each JPEG transcoded with a restart marker after every MCU: about 5%
# larger than the file on photos; allowed for with a margin.
GROWTH = {"original": 1.0, "grid": 1.08}


class Room(NamedTuple):
    free: int            # bytes this process may still write there
    filesystem: str      # for messages: its mount point and type, e.g. "/data (ext4)"


def room_at(folder: str) -> Room:
    st = os.statvfs(folder)
    return Room(free=st.f_bavail * st.f_frsize, filesystem=filesystem_of(folder))


def filesystem_of(path: str) -> str:
    """The mount point holding ``path`` and its type, e.g. "/ (overlay)"."""
    path = os.path.realpath(path)
    best, kind = "/", ""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) < 3:
                    continue
                point = fields[1].replace("\\040", " ")
                inside = path == point or path.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, fields[2]
    except OSError:  # not Linux: walk up to the mount point instead
        best = path
        while not os.path.ismount(best) and os.path.dirname(best) != best:
            best = os.path.dirname(best)
    return f"{best} ({kind})" if kind else best


def estimate(fmt: str, lengths: list[int], path_bytes: int, layout: str = "original") -> int:
    """Bytes a pack of files of ``lengths`` needs in format ``fmt`` ("lmdb" or "hdf5"),
    assuming records as large as their files (JPEGs are stored as they are), or as large
    as their grid transcodes for ``layout`` "grid"."""
    n = len(lengths)
    if GROWTH[layout] != 1.0:
        lengths = [int(length * GROWTH[layout]) for length in lengths]
    if fmt == "lmdb":
        pages = sum(-(-(length + 16) // LMDB_PAGE) for length in lengths)  # each value's overflow pages
        data = pages * LMDB_PAGE
    else:
        data = sum(lengths)
    return data + n * _PER_RECORD[fmt] + 2 * path_bytes + _FIXED


def check_room(out: str, fmt: str, lengths: list[int], path_bytes: int, layout: str = "original") -> None:
    """DiskFullError when the estimate for these files does not fit next to ``out``."""
    needed = estimate(fmt, lengths, path_bytes, layout)
    try:
        room = room_at(os.path.dirname(out))
    except OSError:
        return  # a filesystem that cannot say: find out by writing
    if needed > room.free:
        from feedline.dataset.describe import human_bytes  # imports the stores: only for this message
        raise DiskFullError(
            f"{out}: needs {human_bytes(needed)}, {human_bytes(room.free)} free on {room.filesystem} "
            f"({len(lengths):,} files, {human_bytes(sum(lengths))} of input plus the {fmt} format's "
            f"overhead{' and the grid layout' if layout != 'original' else ''}). Free space or write OUT elsewhere; pass --no-space-check if the output will be "
            "smaller than the input (large PNG or TIFF files shrink when converted to JPEG).")


def check_room_for(out: str, fmt: str, root: str, rels: list[str], layout: str = "original") -> None:
    """`check_room` for the files ``rels`` under ``root``, by their sizes on disk. A sample
    of about a thousand files is enough when it shows that twice the need fits, so a
    large pack does not stat every file first."""
    step = max(1, len(rels) // _SAMPLE)
    if step > 1:
        sample = file_sizes(root, rels[::step])
        try:
            free = room_at(os.path.dirname(out)).free
        except OSError:
            return
        if 2 * estimate(fmt, sample, sum(map(len, rels[::step])), layout) * step < free:
            return
    check_room(out, fmt, file_sizes(root, rels), sum(map(len, rels)), layout)


def file_sizes(root: str, rels: list[str]) -> list[int]:
    """The size of each file ``root/rel``; 0 for one that cannot be read."""
    sizes = []
    for rel in rels:
        try:
            sizes.append(os.stat(os.path.join(root, rel)).st_size)
        except OSError:
            sizes.append(0)  # unreadable: it will be skipped and listed
    return sizes


def is_disk_full(exc: BaseException, folder: str) -> bool:
    code = getattr(exc, "errno", None)
    text = str(exc).lower()
    if code in _SPACE_ERRNOS or any(w in text for w in _SPACE_WORDS):
        return True
    if code == errno.EIO or "input/output error" in text:
        try:
            return room_at(folder).free < _NEARLY_FULL
        except OSError:
            return False
    return False


def write_failed(where: str, exc: BaseException) -> PackError:
    """The error for a failed write of ``where``: a full disk said as such, and how to carry on."""
    detail = getattr(exc, "strerror", None) or str(exc)
    folder = os.path.dirname(os.path.abspath(where))
    if is_disk_full(exc, folder):
        from feedline.dataset.describe import human_bytes  # imports the stores: only for this message
        try:
            room = room_at(folder)
            free = f"; {human_bytes(room.free)} free on {room.filesystem}"
        except OSError:
            free = ""
        return DiskFullError(f"{where}: the disk is full ({detail}{free}). Nothing already written is "
                             "damaged: the partial output is kept. Free space, then rerun the same "
                             "command with --resume to continue from the last commit.")
    return PackError(f"{where}: write failed ({detail}); what is committed is intact: "
                     "fix the cause and rerun with --resume")
