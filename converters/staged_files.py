"""The files an HDF5 pack stages before its container exists (hdf5_writer.py): recovering
them for a resume, and writing and copying their bytes in few system calls."""
from __future__ import annotations

import errno
import json
import logging
import os

from feedline.core.errors import PackError

from .journal import JournalEntry

log = logging.getLogger(__name__)

_IOV_MAX = 1024  # buffers per writev: the Linux limit
_COPY_FALLBACK_ERRNOS = (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF)


def recover(journal_path: str, staging_path: str, masks_path: str) -> tuple[int, list[JournalEntry]]:
    """(where the staged bytes start, the entries of the complete journal lines); the staged
    files cut back to the last of them. The journal's first line says where the staged bytes start."""
    with open(journal_path, "rb") as fh:
        raw = fh.read()
    complete = raw[:raw.rfind(b"\n") + 1]  # a line without its newline was cut short
    lines = complete.splitlines()
    try:
        base = int(json.loads(lines[0])["staged_at"])
    except (IndexError, ValueError, KeyError, TypeError):
        raise PackError(f"{journal_path}: not a feedline staging journal; start over without --resume") from None
    entries = [JournalEntry.from_bytes(line, journal_path) for line in lines[1:]]
    nbytes = sum(sum(e.lengths) for e in entries)
    staged = os.path.getsize(staging_path) - base
    if staged < nbytes:
        raise PackError(f"{staging_path}: {staged} staged bytes but the journal needs {nbytes}; "
                        "start over without --resume")
    cut_staged_masks(masks_path, entries)
    os.truncate(journal_path, len(complete))
    # Also undoes a container head and tail written around the bytes by an interrupted finish.
    os.truncate(staging_path, base + nbytes)
    return base, entries


def cut_staged_masks(path: str, entries: list[JournalEntry]) -> None:
    """The staged masks cut back to what the journal's entries hold (a missing file: none staged yet)."""
    needed = sum(sum(e.mask_lengths) for e in entries)
    staged = os.path.getsize(path) if os.path.exists(path) else 0
    if staged < needed:
        raise PackError(f"{path}: {staged} staged mask bytes but the journal needs {needed}; "
                        "start over without --resume")
    if staged:
        os.truncate(path, needed)


def write_all(fd: int, buffers: list[bytes]) -> None:
    """Write all ``buffers`` in order, few system calls (writev), partial writes resumed."""
    views = [memoryview(b) for b in buffers if len(b)]
    i = 0
    while i < len(views):
        written = os.writev(fd, views[i:i + _IOV_MAX])
        while i < len(views) and written >= len(views[i]):
            written -= len(views[i])
            i += 1
        if written:
            views[i] = views[i][written:]


def copy_range(src: str, src_offset: int, dst: str, dst_offset: int, count: int) -> None:
    """Copy ``count`` bytes in the kernel from ``src`` to ``dst``, then fsync ``dst``."""
    with open(src, "rb") as s, open(dst, "r+b") as d:
        done = 0
        try:
            while done < count:
                n = os.copy_file_range(s.fileno(), d.fileno(), count - done,
                                       src_offset + done, dst_offset + done)
                if n == 0:
                    raise PackError(f"{src}: ended after {done} of {count} bytes")
                done += n
        except (OSError, AttributeError) as exc:
            if isinstance(exc, OSError) and exc.errno not in _COPY_FALLBACK_ERRNOS:
                raise
            log.debug("copy_file_range unavailable (%s); copying through a buffer", exc)
            buffer = memoryview(bytearray(8 << 20))
            while done < count:
                n = os.preadv(s.fileno(), [buffer[:min(len(buffer), count - done)]], src_offset + done)
                if n == 0:
                    raise PackError(f"{src}: ended after {done} of {count} bytes") from None
                written = 0
                while written < n:
                    written += os.pwrite(d.fileno(), buffer[written:n], dst_offset + done + written)
                done += n
        os.fsync(d.fileno())
