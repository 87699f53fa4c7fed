"""Check one input file and turn it into record bytes, or say why it is skipped.

JPEGs that every decoder reads (baseline or progressive Huffman, 8-bit, YCbCr or
gray, no EXIF rotation) are stored byte for byte after a header check
(`jpeg_header` plus libjpeg-turbo's tjDecompressHeader); they are not decoded.
Everything else is decoded once and re-encoded as a baseline JPEG (`reencode`;
see `pixels` for the conventions). `check_file` is the cheap part, `convert` the slow
one, so that the packer can run them on different threads; the slow part's libraries
(Pillow, OpenCV, numpy) are imported by the first file that needs converting, so a
pack of JPEGs stored as they are never loads them. Thread-safe: no shared mutable state.
"""
from __future__ import annotations

import os
import threading

from .jpeg_header import PASS_THROUGH_SOF, SOI, JpegError, parse_jpeg
from .options import PackOptions
from .records import Conversion, Record, dct_draft, too_large
from .report import Skip, SkipReason
from .turbo_header import TurboHeader

_TJCS_YCBCR, _TJCS_GRAY = 1, 2          # turbojpeg.TJCS_*; values fixed by the C API
_TJ_KNOWN_SUBSAMPLING = range(0, 6)     # 444, 422, 420, gray, 440, 411: all that nvJPEG reads

_header_lock = threading.Lock()
_header = None


def _turbo_header(data: bytes) -> tuple[int, int, int, int]:
    """tjDecompressHeader3: (width, height, subsampling, colorspace)."""
    global _header
    if _header is None:
        with _header_lock:
            if _header is None:
                _header = TurboHeader()
    return _header(data)


def read_file(path: str) -> bytes:
    """The whole file, in fewer system calls than open().read() makes."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        data = os.read(fd, size) if size else b""
        if len(data) < size or not size:  # a short read, or a file whose size stat does not know
            chunks = [data]
            while chunk := os.read(fd, max(size - len(data), 1 << 20)):
                chunks.append(chunk)
            data = b"".join(chunks)
        return data
    finally:
        os.close(fd)


def check_file(root: str, rel: str, options: PackOptions) -> Record | Skip | Conversion:
    """Read and check ``root/rel``: its record when it can be stored as it is (the fast,
    common case), a Skip, or the Conversion to run."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:  # the store keeps paths as UTF-8
        return Skip(rel, SkipReason.UNREADABLE, "the file name is not valid UTF-8; rename the file")
    try:
        data = read_file(os.path.join(root, rel))
    except OSError as exc:
        return Skip(rel, SkipReason.UNREADABLE, exc.strerror or str(exc))
    if not data:
        return Skip(rel, SkipReason.EMPTY, "zero-byte file")
    if data[:2] == SOI:
        return _check_jpeg(data, rel, options)
    return Conversion(rel, data, "not a JPEG")


def _check_jpeg(data: bytes, rel: str, options: PackOptions) -> Record | Skip | Conversion:
    try:
        info = parse_jpeg(data)
    except JpegError as exc:
        return Skip(rel, exc.reason, exc.detail)
    draft = None
    if options.max_side is not None and max(info.height, info.width) > options.max_side:
        draft, decoded = dct_draft(info.height, info.width, options.max_side)
        if decoded > options.max_pixels:
            return too_large(rel, info.width, info.height, options, decoded)
        if info.height * info.width > options.max_pixels:   # huge, but its scaled decode is not
            return Conversion(rel, data, f"longer side {max(info.height, info.width)} > max_side", draft=draft)
    elif info.height * info.width > options.max_pixels:
        return too_large(rel, info.width, info.height, options)
    why = info.conversion_reason()
    if why is not None:
        exotic = info.sof not in PASS_THROUGH_SOF or info.arithmetic or info.precision != 8
        return Conversion(rel, data, why, bits=info.precision, exotic=exotic, draft=draft,
                          orientation=info.orientation)
    try:
        width, height, subsampling, colorspace = _turbo_header(data)
    except OSError as exc:
        return Conversion(rel, data, f"libjpeg-turbo rejects its header ({exc})")
    if (height, width) != (info.height, info.width):
        return Conversion(rel, data, f"libjpeg-turbo reads a {width}x{height} header")
    if colorspace not in (_TJCS_YCBCR, _TJCS_GRAY):
        return Conversion(rel, data, f"JPEG colour space {colorspace} (not YCbCr or gray)")
    if subsampling not in _TJ_KNOWN_SUBSAMPLING:
        return Conversion(rel, data, "unusual chroma subsampling")
    if draft is not None:
        return Conversion(rel, data, f"longer side {max(height, width)} > max_side", draft=draft)
    return Record(data, height, width, None, len(data))


def convert(job: Conversion, options: PackOptions) -> Record | Skip:
    """Decode ``job``'s file and re-encode it as a baseline JPEG (see `reencode`)."""
    from .reencode import reencode
    return reencode(job, options)


__all__ = ["Conversion", "Record", "check_file", "convert", "read_file"]
