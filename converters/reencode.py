"""Decode a file that cannot be stored as it is and re-encode it as a baseline JPEG.

Pillow decodes (OpenCV is the second opinion for JPEGs Pillow rejects, such as
12-bit ones); `pixels` turns the pixels into the stored form. The slow part of a
pack, and the only one that needs these libraries: `normalize.convert` imports this
module when the first file needs converting. Thread-safe: no shared mutable state.
"""
from __future__ import annotations

import io
import threading

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from .jpeg_header import SOI
from .options import PackOptions
from .pixels import encode_jpeg, fit_max_side, pil_to_array, scale_to_8bit
from .records import Conversion, Record, too_large
from .report import Skip, SkipReason

# Signatures of the formats Pillow reads for us: a file with one of these that
# Pillow cannot open is damaged, not "not an image".
_PILLOW_LIMIT = threading.Lock()
_ORIENTATION = 0x0112   # the EXIF tag, which ImageOps.exif_transpose applies for 2..8
_SIGNATURES = (b"\x89PNG\r\n\x1a\n", b"GIF87a", b"GIF89a", b"BM", b"II*\x00", b"MM\x00*")


def reencode(job: Conversion, options: PackOptions) -> Record | Skip:
    """Decode with Pillow (OpenCV for what Pillow lacks) and re-encode as baseline JPEG."""
    data, rel = job.data, job.rel
    decoded = _decode_pil(data, rel, options, job.draft)
    if isinstance(decoded, Skip) and data[:2] == SOI and decoded.reason is not SkipReason.TOO_LARGE:
        fallback = _decode_cv2(data, job.bits)
        if fallback is not None:
            decoded = fallback, job.orientation   # OpenCV applies a JPEG's orientation, which its header gave
        elif job.exotic and decoded.reason is SkipReason.CORRUPT:
            decoded = Skip(rel, SkipReason.UNSUPPORTED, f"{job.why}, which no installed decoder reads "
                                                        f"(Pillow: {decoded.detail}; OpenCV failed too)")
    if isinstance(decoded, Skip):
        return decoded
    decoded, orientation = decoded
    try:
        pixels = fit_max_side(decoded, options.max_side)
        encoded = encode_jpeg(pixels, options.quality)
    except (ValueError, MemoryError) as exc:
        return Skip(rel, SkipReason.CORRUPT, f"cannot re-encode it as JPEG ({exc})")
    return Record(encoded, int(pixels.shape[0]), int(pixels.shape[1]), job.why, len(data), orientation=orientation)


def _open_unlimited(data: bytes) -> Image.Image:
    """Image.open (the header only) without Pillow's decompression-bomb limit: --max-pixels
    decides instead, checked by the caller on the size read here, before any pixel is
    decoded (a JPEG shrunk to --max-side is decoded DCT-scaled: its full size is never
    held). Pillow's limit is process-wide: lifted only for this call, under a lock, and put
    back, so other readers in the process (a folder store) keep it."""
    with _PILLOW_LIMIT:
        saved, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
        try:
            return Image.open(io.BytesIO(data))
        finally:
            Image.MAX_IMAGE_PIXELS = saved


def _decode_pil(data: bytes, rel: str, options: PackOptions,
                draft: tuple[int, int] | None = None) -> tuple[np.ndarray, int] | Skip:
    """The pixels with their EXIF orientation applied, and that orientation (1: none)."""
    try:
        im = _open_unlimited(data)
    except UnidentifiedImageError:
        if data.startswith(_SIGNATURES) or data[:2] == SOI or _is_webp(data):
            return Skip(rel, SkipReason.CORRUPT, "a damaged image header (Pillow cannot identify it)")
        return Skip(rel, SkipReason.NOT_AN_IMAGE, "not a recognised image format")
    except Exception as exc:  # noqa: BLE001 - any failure of a decoder on untrusted bytes is a bad file
        return Skip(rel, SkipReason.CORRUPT, f"{type(exc).__name__}: {exc}")
    with im:
        if draft is not None and im.format == "JPEG":
            im.draft(im.mode, draft)   # libjpeg's DCT scaling: at least ``draft``, at most 1/8 smaller
        width, height = im.size
        if width * height > options.max_pixels:
            return too_large(rel, width, height, options)
        try:
            im.seek(0)  # GIF, TIFF, WebP animations: the first frame
            orientation = im.getexif().get(_ORIENTATION, 1)
            oriented = ImageOps.exif_transpose(im)
            return pil_to_array(oriented), orientation if orientation in range(2, 9) else 1
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
