"""Read what a JPEG is from its markers, without decoding it.

Packing must cost about what copying the files costs, so a JPEG is checked, not
decoded: the markers up to the first SOS are parsed here (frame type, precision,
components, Adobe transform, EXIF orientation, arithmetic coding) and the end of
the file is searched for the EOI marker. The entropy-coded data itself is never
read; a JPEG damaged inside it passes this check and is caught by
`feedline verify`, which decodes every record.
"""
from __future__ import annotations

from typing import NamedTuple

from .report import SkipReason

SOI = b"\xff\xd8"
EOI = b"\xff\xd9"
# Trailing bytes allowed after EOI (padding, vendor trailers). Inside entropy-coded
# data 0xFF is always followed by 0x00 or a restart marker, so FFD9 there is the real EOI.
EOI_WINDOW = 16 * 1024

SOF_NAMES = {
    0xC0: "baseline", 0xC1: "extended sequential", 0xC2: "progressive", 0xC3: "lossless",
    0xC5: "differential sequential", 0xC6: "differential progressive", 0xC7: "differential lossless",
    0xC9: "arithmetic sequential", 0xCA: "arithmetic progressive", 0xCB: "arithmetic lossless",
    0xCD: "differential arithmetic sequential", 0xCE: "differential arithmetic progressive",
    0xCF: "differential arithmetic lossless",
}
PASS_THROUGH_SOF = (0xC0, 0xC1, 0xC2)   # Huffman-coded sequential or progressive
_STANDALONE = frozenset([0x01, *range(0xD0, 0xD8)])
_DAC, _SOS, _APP1, _APP14 = 0xCC, 0xDA, 0xE1, 0xEE
# Segments whose content does not matter here (DQT, DHT, DRI, APP0, COM, ...): most of a
# JPEG's segments, stepped over on a fast path.
_SKIPPED = frozenset(range(0x01, 0xFF)) - _STANDALONE - set(SOF_NAMES) - {0xD8, 0xD9, _DAC, _SOS, _APP1, _APP14}


class JpegError(Exception):
    """The file starts like a JPEG but cannot be one; carries the skip reason."""

    def __init__(self, reason: SkipReason, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class JpegInfo(NamedTuple):
    """What the markers say; one per JPEG packed (a named tuple: cheap to make)."""

    sof: int                    # frame marker, 0xC0..0xCF
    precision: int              # bits per sample
    height: int
    width: int
    components: int
    adobe_transform: int | None  # APP14 "Adobe" colour transform: 0 none (RGB/CMYK), 1 YCbCr, 2 YCCK
    orientation: int            # EXIF orientation 1..8; 1 when absent
    arithmetic: bool            # arithmetic-coding tables (DAC) present

    def conversion_reason(self) -> str | None:
        """Why this JPEG must be re-encoded to be read by every decoder, or None."""
        if self.sof not in PASS_THROUGH_SOF:
            return f"{SOF_NAMES[self.sof]} JPEG (SOF{self.sof - 0xC0})"
        if self.arithmetic:
            return "arithmetic-coded JPEG"
        if self.precision != 8:
            return f"{self.precision}-bit JPEG"
        if self.components not in (1, 3):
            kind = "YCCK" if self.adobe_transform == 2 else "CMYK"
            return f"{self.components}-component ({kind}) JPEG"
        if self.components == 3 and self.adobe_transform == 0:
            return "RGB-coded JPEG (Adobe transform 0)"
        if self.orientation != 1:
            return f"EXIF orientation {self.orientation}"
        return None


def exif_orientation(tiff: bytes) -> int:
    """The orientation tag (0x0112) of IFD0 of an EXIF TIFF block; 1 when absent or unreadable."""
    if len(tiff) < 8 or tiff[:2] not in (b"II", b"MM"):
        return 1
    order = "little" if tiff[:2] == b"II" else "big"
    ifd = int.from_bytes(tiff[4:8], order)
    if ifd + 2 > len(tiff):
        return 1
    for k in range(int.from_bytes(tiff[ifd:ifd + 2], order)):
        entry = ifd + 2 + 12 * k
        if entry + 12 > len(tiff):
            break
        if int.from_bytes(tiff[entry:entry + 2], order) != 0x0112:
            continue
        kind = int.from_bytes(tiff[entry + 2:entry + 4], order)
        width = {3: 2, 4: 4}.get(kind)  # SHORT, LONG
        if width is None:
            return 1
        value = int.from_bytes(tiff[entry + 8:entry + 8 + width], order)
        return value if 1 <= value <= 8 else 1
    return 1


def _next_marker(data: bytes, pos: int) -> int:
    """The position of the next marker at or after ``pos`` (0xFF then neither 0x00 nor the
    end), as libjpeg's next_marker finds it; JpegError when there is none."""
    while True:
        pos = data.find(b"\xff", pos)
        if pos < 0 or pos + 1 >= len(data):
            raise JpegError(SkipReason.CORRUPT, "bytes where a marker should be, and no marker after them")
        if data[pos + 1] != 0x00:
            return pos
        pos += 2


def parse_jpeg(data: bytes) -> JpegInfo:
    """Parse the markers of a JPEG up to its first SOS and check that it ends with EOI.

    Raises JpegError (truncated or corrupt) for anything a decoder would reject early.
    """
    n = len(data)
    if data[:2] != SOI:
        raise JpegError(SkipReason.NOT_AN_IMAGE, "no JPEG start-of-image marker")
    frame = None
    adobe = None
    orientation = 1
    arithmetic = False
    pos = 2
    while True:
        if pos + 4 <= n and data[pos] == 0xFF and data[pos + 1] in _SKIPPED:
            end = pos + 2 + ((data[pos + 2] << 8) | data[pos + 3])
            if pos + 4 <= end <= n:
                pos = end
                continue
        # Everything else (and the errors) the long way. A marker is 0xFF, any number of
        # 0xFF fill bytes, then the marker code.
        if pos + 1 >= n:
            raise JpegError(SkipReason.TRUNCATED, f"ends at byte {n} before the image data (no SOS marker)")
        if data[pos] != 0xFF:
            # Junk between segments (an EXIF segment whose length is short): libjpeg skips to
            # the next marker with a warning and decodes every pixel; so do we.
            pos = _next_marker(data, pos)
            continue
        marker = data[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        if marker in _STANDALONE:
            pos += 2
            continue
        if marker in (0x00, 0xD8, 0xD9):
            raise JpegError(SkipReason.CORRUPT, f"unexpected marker 0xFF{marker:02X} at byte {pos}")
        if pos + 4 > n:
            raise JpegError(SkipReason.TRUNCATED, f"ends at byte {n} inside the 0xFF{marker:02X} segment")
        length = (data[pos + 2] << 8) | data[pos + 3]
        end = pos + 2 + length
        if length < 2:
            raise JpegError(SkipReason.CORRUPT, f"segment 0xFF{marker:02X} at byte {pos} has length {length}")
        if end > n:
            raise JpegError(SkipReason.TRUNCATED, f"ends at byte {n} inside the 0xFF{marker:02X} segment")
        # Only the few segments that matter are sliced (copied); the rest are skipped over.
        if marker in SOF_NAMES:
            if frame is not None:
                raise JpegError(SkipReason.CORRUPT, "two frame headers (SOF) before the image data")
            frame = _parse_sof(marker, data[pos + 4:end])
        elif marker == _SOS:
            if frame is None:
                raise JpegError(SkipReason.CORRUPT, "image data (SOS) before a frame header (SOF)")
            break
        elif marker == _DAC:
            arithmetic = True
        elif marker == _APP14 and data.startswith(b"Adobe", pos + 4) and length >= 14:
            adobe = data[pos + 15]
        elif marker == _APP1 and data.startswith(b"Exif\x00\x00", pos + 4):
            orientation = exif_orientation(data[pos + 10:end])
        pos = end
    if data.rfind(EOI, max(end, n - EOI_WINDOW)) < 0:
        raise JpegError(SkipReason.TRUNCATED, "no end-of-image marker (FFD9) at the end of the file")
    sof, precision, height, width, components = frame
    return JpegInfo(sof, precision, height, width, components, adobe, orientation, arithmetic or sof >= 0xC9)


def _parse_sof(marker: int, seg: bytes) -> tuple[int, int, int, int, int]:
    if len(seg) < 6:
        raise JpegError(SkipReason.CORRUPT, "frame header (SOF) too short")
    precision, height, width, components = seg[0], int.from_bytes(seg[1:3], "big"), \
        int.from_bytes(seg[3:5], "big"), seg[5]
    if len(seg) < 6 + 3 * components or components == 0:
        raise JpegError(SkipReason.CORRUPT, f"frame header (SOF) with {components} components is malformed")
    if width == 0 or height == 0:
        # Height 0 means "given later by a DNL marker", which libjpeg-turbo does not support.
        raise JpegError(SkipReason.CORRUPT, f"frame header (SOF) gives a size of {width}x{height}")
    return marker, precision, height, width, components
