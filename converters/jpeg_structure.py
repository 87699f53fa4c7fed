"""A JPEG's marker structure checked as libjpeg-turbo's decompressor checks it, before a
transcode: the structural faults that are *fatal* errors for libjpeg (an undefined or bogus
Huffman or quantization table, a second SOF, an unknown marker, bad scan parameters, a
bad segment length) are found here, so the transcode never meets them. A fatal libjpeg
error cannot be recovered from through ctypes (see `libjpeg_transcode`); damaged
entropy-coded data is only a libjpeg warning and is left to the transcode.

Every marker is visited: the segments before the first scan byte by byte, the markers
between and after scans with one vectorized scan for FF bytes (in entropy-coded data FF is
followed by 00, a restart marker, or the next segment).
"""
from __future__ import annotations

import numpy as np

_SOF = (0xC0, 0xC1, 0xC2)
_DHT, _DQT, _DRI, _SOS, _EOI, _DNL, _COM = 0xC4, 0xDB, 0xDD, 0xDA, 0xD9, 0xDC, 0xFE
_BETWEEN = {_DHT, _DQT, _DRI, _SOS, _EOI, _DNL, _COM, 0x01, 0xCC, *range(0xD0, 0xD8), *range(0xE0, 0xF0)}


class StructureError(ValueError):
    """A fault libjpeg-turbo would stop on with a fatal error."""


def check_structure(data: bytes) -> None:
    """Raise StructureError naming the first fault libjpeg would find fatal in ``data``."""
    _Walk(data).run()


class _Walk:
    def __init__(self, data: bytes):
        self.data, self.n = data, len(data)
        self.quant: set[int] = set()
        self.huff: dict[tuple[int, int], bytes] = {}   # (class, id) -> symbols
        self.frame: dict[int, tuple[int, int, int]] | None = None   # component id -> (h, v, quant table)
        self.progressive = False
        self.latched: set[int] = set()
        self.scans = 0
        self.marker_at: np.ndarray | None = None   # every marker's 0xFF, found once per file (scan_end)

    def run(self) -> None:
        self.markers()
        if not self.scans:   # libjpeg's "JPEG datastream contains no image", fatal
            raise StructureError("the file contains no image (no frame and scan before its end)")

    def markers(self) -> None:
        d, pos = self.data, 2
        if self.n < 4 or d[0] != 0xFF or d[1] != 0xD8:
            raise StructureError("no start-of-image marker")
        while pos + 1 < self.n:
            if d[pos] != 0xFF:
                raise StructureError(f"no marker at byte {pos}")
            code = d[pos + 1]
            if code == 0xFF:
                pos += 1
                continue
            if code == _EOI:
                return
            if code == 0x01 or 0xD0 <= code <= 0xD7:
                pos += 2
                continue
            if pos + 4 > self.n:
                return                      # cut short: a libjpeg warning (premature end), not fatal
            length = d[pos + 2] << 8 | d[pos + 3]
            if length < 2:
                raise StructureError(f"marker FF{code:02X} at byte {pos} has a bogus length {length}")
            body = d[pos + 4:pos + 2 + length]
            self.segment(code, body, pos)
            pos += 2 + length
            if code == _SOS:
                pos = self.scan_end(pos)

    def segment(self, code: int, body: bytes, pos: int) -> None:
        if code in _SOF:
            self.sof(code, body)
        elif 0xC0 <= code <= 0xCF and code not in (_DHT, 0xC8, 0xCC):
            raise StructureError(f"an unsupported frame type FF{code:02X}")
        elif code == _DQT:
            self.dqt(body)
        elif code == _DHT:
            self.dht(body)
        elif code == _DRI and len(body) != 2:
            raise StructureError("a DRI segment of the wrong length")
        elif code == _SOS:
            self.sos(body)
        elif code not in _BETWEEN:
            raise StructureError(f"an unknown marker FF{code:02X} at byte {pos}")

    def sof(self, code: int, body: bytes) -> None:
        if self.frame is not None:
            raise StructureError("two SOF markers")
        if len(body) < 6 or len(body) != 6 + 3 * body[5]:
            raise StructureError("a SOF segment of the wrong length")
        if body[0] != 8 or not (body[1] or body[2]) or not (body[3] or body[4]) or not 1 <= body[5] <= 4:
            raise StructureError(f"an unusual frame ({body[0]}-bit, {body[5]} components, or an empty image)")
        self.frame, self.progressive = {}, code == 0xC2
        for k in range(body[5]):
            cid, hv, tq = body[6 + 3 * k:9 + 3 * k]
            if not (1 <= hv >> 4 <= 4 and 1 <= hv & 15 <= 4) or tq > 3:
                raise StructureError(f"component {cid}: bad sampling factors or quantization table {tq}")
            self.frame[cid] = (hv >> 4, hv & 15, tq)

    def dqt(self, body: bytes) -> None:
        at = 0
        while at < len(body):
            precision, table = body[at] >> 4, body[at] & 15
            if table > 3 or precision > 1:
                raise StructureError(f"a bogus DQT index {table} (precision {precision})")
            self.quant.add(table)
            at += 1 + 64 * (1 + precision)
        if at != len(body):
            raise StructureError("a DQT segment of the wrong length")

    def dht(self, body: bytes) -> None:
        at = 0
        while at < len(body):
            if at + 17 > len(body):
                raise StructureError("a DHT segment of the wrong length")
            kind, table = body[at] >> 4, body[at] & 15
            counts = body[at + 1:at + 17]
            total = sum(counts)
            if kind > 1 or table > 3 or total > 256 or at + 17 + total > len(body) or not _codes_fit(counts):
                raise StructureError(f"a bogus Huffman table definition (class {kind}, index {table})")
            self.huff[kind, table] = body[at + 17:at + 17 + total]
            at += 17 + total

    def sos(self, body: bytes) -> None:
        if self.frame is None:
            raise StructureError("a scan before the frame header")
        self.scans += 1
        ns = body[0] if body else 0
        if not 1 <= ns <= 4 or len(body) != 4 + 2 * ns:
            raise StructureError("a SOS segment of the wrong length")
        ss, se, ah, al = body[1 + 2 * ns], body[2 + 2 * ns], body[3 + 2 * ns] >> 4, body[3 + 2 * ns] & 15
        ids = [body[1 + 2 * k] for k in range(ns)]
        if len(set(ids)) != ns or any(c not in self.frame for c in ids):
            raise StructureError(f"invalid component IDs {ids} in SOS")
        if ns > 1 and sum(self.frame[c][0] * self.frame[c][1] for c in ids) > 10:
            raise StructureError("too many blocks in an MCU")
        if self.progressive and (ss > se or se > 63 or (ss == 0) != (se == 0) or (ss and ns != 1)
                                 or (ah and al != ah - 1) or al > 13):
            raise StructureError(f"invalid progressive parameters Ss={ss} Se={se} Ah={ah} Al={al}")
        for k, cid in enumerate(ids):
            if cid not in self.latched and self.frame[cid][2] not in self.quant:
                raise StructureError(f"quantization table {self.frame[cid][2]} was not defined")
            self.latched.add(cid)
            dc, ac = body[2 + 2 * k] >> 4, body[2 + 2 * k] & 15
            if (not self.progressive or (ss == 0 and ah == 0)) and self._table(0, dc) \
                    and max(self.huff[0, dc], default=0) > 15:
                raise StructureError(f"a bogus DC Huffman table {dc}")
            if not self.progressive or ss:
                self._table(1, ac)

    def _table(self, kind: int, table: int) -> bool:
        """Whether table (kind, table) was defined; libjpeg supplies the standard tables 0 and 1."""
        if table > 3 or ((kind, table) not in self.huff and table > 1):
            raise StructureError(f"Huffman table {kind}/{table} was not defined")
        return (kind, table) in self.huff

    def scan_end(self, pos: int) -> int:
        """The offset of the first marker after the entropy-coded data starting at ``pos``.
        The markers of the whole file are found on the first call, so a progressive JPEG's
        many scans cost one pass over the file, not one each."""
        if self.marker_at is None:
            data = np.frombuffer(self.data, dtype=np.uint8)
            ff = np.flatnonzero(data[:-1] == 0xFF)
            follow = data[ff + 1]   # not stuffing (00), a restart marker (D0-D7) or fill (FF)
            self.marker_at = ff[(follow != 0) & ((follow & 0xF8) != 0xD0) & (follow != 0xFF)]
        k = int(np.searchsorted(self.marker_at, pos))
        return int(self.marker_at[k]) if k < len(self.marker_at) else self.n


def _codes_fit(counts: bytes) -> bool:
    """libjpeg's check that the code lengths make a prefix code (jpeg_make_d_derived_tbl)."""
    code, used = 0, [k for k in range(16) if counts[k]]
    if not used:
        return True
    for length in range(used[0], used[-1] + 1):
        code += counts[length]
        if code >= 1 << (length + 1):
            return False
        code <<= 1
    return True
