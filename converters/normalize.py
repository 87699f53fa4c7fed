"""Check one input file and turn it into record bytes, or say why it is skipped.

JPEGs that every decoder reads (baseline or progressive Huffman, 8-bit, YCbCr or
gray, no EXIF rotation) are stored byte for byte after a header check
(`jpeg_header` plus libjpeg-turbo's tjDecompressHeader); they are not decoded.
Everything else is decoded once and re-encoded as a baseline JPEG (see `pixels`
for the conventions). `check_file` is the cheap part, `convert` the slow one, so
that the packer can run them on different threads. Thread-safe: no shared mutable state.
"""
from __future__ import annotations

import io
import os
import threading
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from .jpeg_header import PASS_THROUGH_SOF, SOI, JpegError, parse_jpeg
from .options import PackOptions
from .pixels import encode_jpeg, fit_max_side, pil_to_array, scale_to_8bit
from .report import Skip, SkipReason
from .turbo_header import TurboHeader

# Signatures of the formats Pillow reads for us: a file with one of these that
# Pillow cannot open is damaged, not "not an image".
_SIGNATURES = (b"\x89PNG\r\n\x1a\n", b"GIF87a", b"GIF89a", b"BM", b"II*\x00", b"MM\x00*")
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


@dataclass(frozen=True)
class Record:
    data: bytes
    height: int                 # of the stored image
    width: int
    converted: str | None       # why it was re-encoded; None when stored byte for byte
    source_bytes: int


@dataclass(frozen=True)
class Conversion:
    """A file that must be decoded and re-encoded: the slow case, run on the thread pool."""

    rel: str
    data: bytes
    why: str
    bits: int | None = None     # sample precision of a JPEG
    exotic: bool = False        # a JPEG process decoders may lack (12-bit, lossless, arithmetic)


def normalize_file(root: str, rel: str, options: PackOptions) -> Record | Skip:
    """Read ``root/rel`` and return its record, or a Skip with the reason."""
    outcome = check_file(root, rel, options)
    return convert(outcome, options) if isinstance(outcome, Conversion) else outcome


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
    if info.height * info.width > options.max_pixels:
        return _too_large(rel, info.width, info.height, options)
    why = info.conversion_reason()
    if why is not None:
        exotic = info.sof not in PASS_THROUGH_SOF or info.arithmetic or info.precision != 8
        return Conversion(rel, data, why, bits=info.precision, exotic=exotic)
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
    if options.max_side is not None and max(height, width) > options.max_side:
        return Conversion(rel, data, f"longer side {max(height, width)} > max_side")
    return Record(data, height, width, None, len(data))


def _too_large(rel: str, width: int, height: int, options: PackOptions) -> Skip:
    return Skip(rel, SkipReason.TOO_LARGE,
                f"{width}x{height} = {width * height} pixels > max_pixels {options.max_pixels}")


def convert(job: Conversion, options: PackOptions) -> Record | Skip:
    """Decode with Pillow (OpenCV for what Pillow lacks) and re-encode as baseline JPEG."""
    data, rel = job.data, job.rel
    decoded = _decode_pil(data, rel, options)
    if isinstance(decoded, Skip) and data[:2] == SOI and decoded.reason is not SkipReason.TOO_LARGE:
        fallback = _decode_cv2(data, job.bits)
        if fallback is not None:
            decoded = fallback
        elif job.exotic and decoded.reason is SkipReason.CORRUPT:
            decoded = Skip(rel, SkipReason.UNSUPPORTED, f"{job.why}, which no installed decoder reads "
                                                        f"(Pillow: {decoded.detail}; OpenCV failed too)")
    if isinstance(decoded, Skip):
        return decoded
    try:
        pixels = fit_max_side(decoded, options.max_side)
        encoded = encode_jpeg(pixels, options.quality)
    except (ValueError, MemoryError) as exc:
        return Skip(rel, SkipReason.CORRUPT, f"cannot re-encode it as JPEG ({exc})")
    return Record(encoded, int(pixels.shape[0]), int(pixels.shape[1]), job.why, len(data))


def _decode_pil(data: bytes, rel: str, options: PackOptions) -> np.ndarray | Skip:
    try:
        im = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        if data.startswith(_SIGNATURES) or data[:2] == SOI or _is_webp(data):
            return Skip(rel, SkipReason.CORRUPT, "a damaged image header (Pillow cannot identify it)")
        return Skip(rel, SkipReason.NOT_AN_IMAGE, "not a recognised image format")
    except Image.DecompressionBombError as exc:
        return Skip(rel, SkipReason.TOO_LARGE, f"over Pillow's own pixel limit ({exc})")
    except Exception as exc:  # noqa: BLE001 - any failure of a decoder on untrusted bytes is a bad file
        return Skip(rel, SkipReason.CORRUPT, f"{type(exc).__name__}: {exc}")
    with im:
        width, height = im.size
        if width * height > options.max_pixels:
            return _too_large(rel, width, height, options)
        try:
            im.seek(0)  # GIF, TIFF, WebP animations: the first frame
            oriented = ImageOps.exif_transpose(im)
            return pil_to_array(oriented)
        except (OSError, EOFError) as exc:
            reason = SkipReason.TRUNCATED if isinstance(exc, EOFError) or "truncat" in str(exc) \
                else SkipReason.CORRUPT
            return Skip(rel, reason, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - as above
            return Skip(rel, SkipReason.CORRUPT, f"{type(exc).__name__}: {exc}")


def _decode_cv2(data: bytes, bits: int | None) -> np.ndarray | None:
    """OpenCV's decoder, a second opinion for JPEGs Pillow rejects (12-bit ones where
    OpenCV's libjpeg-turbo build reads them); None when it fails. Returns RGB with the
    EXIF orientation applied (OpenCV does that unless told not to)."""
    import cv2
    try:
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_ANYDEPTH | cv2.IMREAD_ANYCOLOR)
    except cv2.error:
        return None
    if image is None:
        return None
    image = scale_to_8bit(image, bits if bits and bits > 8 and image.dtype != np.uint8 else None)
    if image.ndim == 3:
        image = cv2.cvtColor(image, cv2.COLOR_BGRA2RGB if image.shape[2] == 4 else cv2.COLOR_BGR2RGB)
    return image


def _is_webp(data: bytes) -> bool:
    return data[:4] == b"RIFF" and data[8:12] == b"WEBP"
