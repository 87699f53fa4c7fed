"""Tiny real image files for the packing tests: every input kind `pack` must handle.

Each builder writes one file and returns the pixels a correct record decodes to
(uint8 RGB H x W x 3, or H x W for gray), so tests compare decoded records with it.
Images are small (64 x 48) and smooth, so JPEG errors stay small.
"""
from __future__ import annotations

import io
import os
import struct
import zlib

import cv2
import numpy as np
from PIL import Image

W, H = 64, 48


def pattern(h: int = H, w: int = W) -> np.ndarray:
    """Smooth, asymmetric RGB: four coloured quadrants with soft gradients, so a
    rotation or a channel swap shows as a large difference."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    top, left = y < h / 2, x < w / 2
    img[top & left] = (220, 40, 40)
    img[top & ~left] = (40, 200, 60)
    img[~top & left] = (40, 60, 210)
    img[~top & ~left] = (230, 230, 120)
    img += (x / w * 20)[..., None]
    img = cv2.GaussianBlur(img, (5, 5), 1.5)
    return np.clip(img, 0, 255).astype(np.uint8)


def gray_pattern(h: int = H, w: int = W) -> np.ndarray:
    return cv2.cvtColor(pattern(h, w), cv2.COLOR_RGB2GRAY)


def _save(path: str, im: Image.Image, **kw) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    im.save(path, **kw)


def _on_white(rgb: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    a = alpha.astype(np.float32)[..., None] / 255
    return np.clip(np.rint(rgb * a + 255 * (1 - a)), 0, 255).astype(np.uint8)


def alpha_ramp(h: int = H, w: int = W) -> np.ndarray:
    return np.tile(np.linspace(0, 255, w).astype(np.uint8), (h, 1))


# --- inputs stored byte for byte ------------------------------------------------

def baseline_jpeg(path: str) -> np.ndarray:
    _save(path, Image.fromarray(pattern()), format="JPEG", quality=95)
    return pattern()


def progressive_jpeg(path: str) -> np.ndarray:
    _save(path, Image.fromarray(pattern()), format="JPEG", quality=95, progressive=True)
    return pattern()


def gray_jpeg(path: str) -> np.ndarray:
    _save(path, Image.fromarray(gray_pattern()), format="JPEG", quality=95)
    return gray_pattern()


# --- inputs converted at pack time ---------------------------------------------

def exif_rotated_jpeg(path: str, orientation: int = 6) -> np.ndarray:
    """Stored as 64 x 48 with EXIF orientation 6: displayed rotated 90 degrees clockwise."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    _save(path, Image.fromarray(pattern()), format="JPEG", quality=95, exif=exif.tobytes())
    assert orientation == 6
    return np.rot90(pattern(), k=-1).copy()


def cmyk_jpeg(path: str) -> np.ndarray:
    _save(path, Image.fromarray(pattern()).convert("CMYK"), format="JPEG", quality=95)
    return pattern()


def png_rgb(path: str) -> np.ndarray:
    _save(path, Image.fromarray(pattern()), format="PNG")
    return pattern()


def png_rgba(path: str) -> np.ndarray:
    rgba = np.dstack([pattern(), alpha_ramp()])
    _save(path, Image.fromarray(rgba, "RGBA"), format="PNG")
    return _on_white(pattern(), alpha_ramp())


def png_la(path: str) -> np.ndarray:
    _save(path, Image.fromarray(np.dstack([gray_pattern(), alpha_ramp()]), "LA"), format="PNG")
    return _on_white(gray_pattern()[..., None], alpha_ramp())[..., 0]


def png_palette(path: str) -> np.ndarray:
    im = Image.fromarray(pattern()).quantize(64)
    _save(path, im, format="PNG")
    return np.asarray(im.convert("RGB"))


def png_palette_transparent(path: str) -> np.ndarray:
    """Palette PNG whose colour 0 is transparent: those pixels become white."""
    im = Image.fromarray(pattern()).quantize(16)
    _save(path, im, format="PNG", transparency=0)
    expected = np.asarray(im.convert("RGB")).copy()
    expected[np.asarray(im) == 0] = 255
    return expected


def png_gray16(path: str) -> np.ndarray:
    g16 = gray_pattern().astype(np.uint16) * 257  # 8-bit values spread over 16 bits
    os.makedirs(os.path.dirname(path), exist_ok=True)
    cv2.imwrite(path, g16)
    return gray_pattern()


def png_rgb16(path: str) -> np.ndarray:
    rgb16 = pattern().astype(np.uint16) * 257
    os.makedirs(os.path.dirname(path), exist_ok=True)
    cv2.imwrite(path, cv2.cvtColor(rgb16, cv2.COLOR_RGB2BGR))
    return pattern()


def gif_first_frame(path: str) -> np.ndarray:
    first = Image.fromarray(pattern()).quantize(64)
    second = Image.fromarray(255 - pattern()).quantize(64)
    _save(path, first, format="GIF", save_all=True, append_images=[second], duration=100)
    return np.asarray(first.convert("RGB"))


def bmp(path: str) -> np.ndarray:
    _save(path, Image.fromarray(pattern()), format="BMP")
    return pattern()


def webp_lossless(path: str) -> np.ndarray:
    _save(path, Image.fromarray(pattern()), format="WEBP", lossless=True)
    return pattern()


def tiff(path: str) -> np.ndarray:
    _save(path, Image.fromarray(pattern()), format="TIFF")
    return pattern()


def _jpeg_segment(marker: int, payload: bytes) -> bytes:
    return struct.pack(">BBH", 0xFF, marker, len(payload) + 2) + payload


def _dht(table_class_id: int, codes: list[tuple[int, int]]) -> bytes:
    """A Huffman table from (symbol, code length) pairs, in canonical order."""
    counts = [0] * 16
    for _, length in codes:
        counts[length - 1] += 1
    return _jpeg_segment(0xC4, bytes([table_class_id, *counts, *(s for s, _ in codes)]))


def _entropy(bits: str) -> bytes:
    bits += "1" * (-len(bits) % 8)
    out = bytearray()
    for i in range(0, len(bits), 8):
        out.append(int(bits[i:i + 8], 2))
        if out[-1] == 0xFF:
            out.append(0x00)  # byte stuffing
    return bytes(out)


def _category(value: int) -> tuple[int, str]:
    if value == 0:
        return 0, ""
    cat = abs(value).bit_length()
    extra = value if value > 0 else value + (1 << cat) - 1
    return cat, format(extra, f"0{cat}b")


def jpeg12_gray(path: str, level: int = 3072, w: int = 16, h: int = 8) -> np.ndarray:
    """A flat gray 12-bit JPEG (SOF1, precision 12), written by hand: no library here encodes one."""
    blocks = (w // 8) * (h // 8)
    cat, extra = _category(8 * (level - 2048))  # DC of a flat block with all-ones quantisation
    bits = "10" + extra + "0" + "00" * (blocks - 1)  # block 1: DC diff + EOB; others: DC 0 + EOB
    data = (b"\xff\xd8" + _jpeg_segment(0xDB, bytes([0x00] + [1] * 64))
            + _jpeg_segment(0xC1, struct.pack(">BHHB", 12, h, w, 1) + bytes([1, 0x11, 0]))
            + _dht(0x00, [(0, 1), (cat, 2)]) + _dht(0x10, [(0x00, 1)])
            + _jpeg_segment(0xDA, bytes([1, 1, 0x00, 0, 63, 0])) + _entropy(bits) + b"\xff\xd9")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)
    return np.full((h, w), round(level * 255 / 4095), np.uint8)


def jpeg_lossless_gray(path: str, level: int = 200, w: int = 16, h: int = 8) -> np.ndarray:
    """A flat gray 8-bit lossless JPEG (SOF3, predictor 1), written by hand."""
    cat, extra = _category(level - 128)  # the first sample is predicted as 2**(P - 1)
    bits = "10" + extra + "0" * (w * h - 1)
    data = (b"\xff\xd8" + _jpeg_segment(0xC3, struct.pack(">BHHB", 8, h, w, 1) + bytes([1, 0x11, 0]))
            + _dht(0x00, [(0, 1), (cat, 2)])
            + _jpeg_segment(0xDA, bytes([1, 1, 0x00, 1, 0, 0])) + _entropy(bits) + b"\xff\xd9")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)
    return np.full((h, w), level, np.uint8)


GOOD_BUILDERS = {
    "baseline.jpg": baseline_jpeg, "progressive.JPEG": progressive_jpeg, "gray.jpg": gray_jpeg,
    "rotated.jpg": exif_rotated_jpeg, "cmyk.jpg": cmyk_jpeg, "rgb.png": png_rgb, "rgba.png": png_rgba,
    "la.png": png_la, "palette.png": png_palette, "palette_t.png": png_palette_transparent,
    "gray16.png": png_gray16, "rgb16.png": png_rgb16, "anim.gif": gif_first_frame, "image.BMP": bmp,
    "image.webp": webp_lossless, "image.tif": tiff, "twelve.jpg": jpeg12_gray,
    "lossless.jpg": jpeg_lossless_gray,
}
PASS_THROUGH = {"baseline.jpg", "progressive.JPEG", "gray.jpg"}


def write_good(folder: str) -> dict[str, np.ndarray]:
    """Every good input kind in ``folder``; {file name: expected decoded pixels}."""
    return {name: build(os.path.join(folder, name)) for name, build in GOOD_BUILDERS.items()}


# --- bad inputs --------------------------------------------------------------

def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)


def _jpeg_bytes() -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pattern()).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def bomb_png(width: int = 30000, height: int = 30000) -> bytes:
    """A tiny PNG whose header claims width x height pixels (a decompression bomb)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
            + chunk(b"IDAT", zlib.compress(b"\x00" * 1024)) + chunk(b"IEND", b""))


def write_bad(folder: str) -> dict[str, str]:
    """One file of each bad kind in ``folder``; {file name: expected skip reason}."""
    jpeg = _jpeg_bytes()
    png = io.BytesIO()
    Image.fromarray(pattern()).save(png, format="PNG")
    png = png.getvalue()
    files = {
        "empty.jpg": (b"", "empty"),
        "text.jpg": (b"this is not an image\n" * 10, "not-an-image"),
        "truncated.jpg": (jpeg[:len(jpeg) // 2], "truncated"),
        "garbage_header.jpg": (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x13" * 200, "corrupt"),
        "cut_in_header.jpg": (jpeg[:40], "truncated"),
        "truncated.png": (png[:len(png) // 2], "truncated"),
        "bad_header.png": (png[:16] + b"\x00" * 40, "corrupt"),
        "bomb.png": (bomb_png(), "too-large"),
    }
    for name, (data, _) in files.items():
        _write(os.path.join(folder, name), data)
    os.symlink(os.path.join(folder, "does-not-exist.jpg"), os.path.join(folder, "broken_link.jpg"))
    expected = {name: reason for name, (_, reason) in files.items()}
    expected["broken_link.jpg"] = "unreadable"
    return expected


def flat_gray_jpeg(height: int, width: int) -> bytes:
    """A real baseline JPEG of ``height`` x ``width`` mid-gray (level 128), built without
    holding its pixels: one-code Huffman tables make every 8x8 block two zero bits (DC
    difference 0, then end of block), so 20000 x 20000 is 1.5 MB, made in milliseconds."""
    def segment(marker: int, payload: bytes) -> bytes:
        return bytes([0xFF, marker]) + struct.pack(">H", len(payload) + 2) + payload

    one_code = bytes([1] + [0] * 15)   # one code of length 1 ('0')
    blocks = -(-height // 8) * -(-width // 8)
    return (b"\xff\xd8" + segment(0xDB, b"\x00" + b"\x01" * 64)
            + segment(0xC0, struct.pack(">BHHB", 8, height, width, 1) + b"\x01\x11\x00")
            + segment(0xC4, b"\x00" + one_code + b"\x00" + b"\x10" + one_code + b"\x00")
            + segment(0xDA, b"\x01\x01\x00\x00\x3f\x00") + bytes(-(-2 * blocks // 8)) + b"\xff\xd9")
