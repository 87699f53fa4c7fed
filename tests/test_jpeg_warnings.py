"""Good JPEGs that make libjpeg warn are good records; damaged ones stay bad (issue 23, item 2).

Real files of each kind, made as they occur: bytes left before a restart marker inside the
scan (as in Pillow's hopper_bad_exif.jpg: "1214 extraneous bytes before marker 0xd0", every
pixel decodes), an EXIF segment whose length is wrong, an ICC profile segment numbered
out of order, an unknown JFIF revision; and real damage: a file cut short and bytes flipped
in the entropy-coded data. The messages come from libjpeg-turbo itself, not from the test.

The damage is made in a photo without restart markers (flipped bits then give "N
extraneous bytes before marker 0xd9"). With restart markers, damage inside one restart
interval can show only as extraneous bytes before the next one: the very warning of
hopper_bad_exif.jpg, which libjpeg cannot tell apart (see feedline.decoders.jpeg_warnings).
Pack (--check decode), verify, info and the loader must agree on each file."""
from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
import simplejpeg

from converters import PackOptions, pack
from feedline import FeedLoader
from feedline.decoders import get_decoder, jpeg_warnings
from feedline.dataset.describe import describe, format_info
from feedline.core.errors import DecodeError
from feedline.sample import make_photo_folder
from feedline.dataset.verify import verify

STRICT = ["simplejpeg", "turbojpeg", "nvimgcodec"]


def strict_decoder(name: str):
    if name == "simplejpeg":   # not a registered backend: nvimgcodec's strict partner
        from feedline.decoders.simplejpeg_decoder import SimplejpegDecoder
        return SimplejpegDecoder(strict=True)
    return get_decoder(name, strict=True)


def _segment(marker: int, payload: bytes, short_by: int = 0) -> bytes:
    return bytes([0xFF, marker]) + (len(payload) + 2 - short_by).to_bytes(2, "big") + payload


def _entropy_start(data: bytes) -> int:
    sos = data.index(b"\xff\xda")
    return sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big")


def extraneous_before_restart(data: bytes) -> bytes:
    """300 bytes left before the first restart marker of the scan (hopper_bad_exif's kind)."""
    rst = data.index(b"\xff\xd0", _entropy_start(data))
    return data[:rst] + b"\x55" * 300 + data[rst:]


def bad_exif_length(data: bytes) -> bytes:
    """An EXIF segment whose length field is 150 bytes short: they are skipped as junk."""
    return data[:2] + _segment(0xE1, b"Exif\x00\x00" + bytes(range(1, 200)), short_by=150) + data[2:]


def bad_icc(data: bytes) -> bytes:
    """An ICC profile chunk numbered 5 of 2."""
    return data[:2] + _segment(0xE2, b"ICC_PROFILE\x00\x05\x02" + bytes(100)) + data[2:]


def unknown_jfif(data: bytes) -> bytes:
    at = data.index(b"JFIF\x00")
    return data[:at + 5] + b"\x03" + data[at + 6:]


def cut_short(data: bytes) -> bytes:
    return data[:(_entropy_start(data) + len(data)) // 2]


def flipped_bits(data: bytes) -> bytes:
    middle = (_entropy_start(data) + len(data)) // 2
    out = bytearray(data)
    for k in range(middle, middle + 16):
        out[k] ^= 0x5A
    return bytes(out)


BENIGN = {"extraneous-before-restart": extraneous_before_restart, "bad-exif-length": bad_exif_length,
          "bad-icc": bad_icc, "unknown-jfif": unknown_jfif}
DAMAGED = {"cut-short": cut_short, "flipped-bits": flipped_bits}


@pytest.fixture(scope="module")
def plain_photo(tmp_path_factory) -> bytes:
    """A real photo JPEG, without restart markers (the damaged files are made from it)."""
    root = tmp_path_factory.mktemp("warning_photo")
    make_photo_folder(str(root), n=1, classes=1, seed=5, gray_fraction=0.0)
    return next(root.rglob("*.jpg")).read_bytes()


@pytest.fixture(scope="module")
def photo(plain_photo) -> bytes:
    """The same photo with restart markers every 4 MCUs, as many cameras write."""
    pixels = cv2.imdecode(np.frombuffer(plain_photo, np.uint8), cv2.IMREAD_COLOR)
    ok, buf = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, 90, cv2.IMWRITE_JPEG_RST_INTERVAL, 4])
    assert ok
    return buf.tobytes()


def libjpeg_warning(data: bytes) -> str:
    """libjpeg-turbo's own first warning for ``data``."""
    with pytest.raises(ValueError) as exc:
        simplejpeg.decode_jpeg(data, "rgb", strict=True)
    return str(exc.value)


@pytest.mark.parametrize("kind", sorted(BENIGN) + sorted(DAMAGED))
def test_each_kind_of_warning_is_classified_from_libjpegs_own_message(photo, plain_photo, kind):
    message = libjpeg_warning(BENIGN[kind](photo) if kind in BENIGN else DAMAGED[kind](plain_photo))
    assert jpeg_warnings.is_benign(message) is (kind in BENIGN), message


def test_the_messages_are_the_ones_named():
    assert jpeg_warnings.is_benign("Corrupt JPEG data: 1214 extraneous bytes before marker 0xd0")
    assert jpeg_warnings.is_benign("Corrupt JPEG data: 150 extraneous bytes before marker 0xdb")
    assert not jpeg_warnings.is_benign("Corrupt JPEG data: 102 extraneous bytes before marker 0xd9")
    for damage in ("Premature end of JPEG file", "Corrupt JPEG data: premature end of data segment",
                   "Corrupt JPEG data: bad Huffman code", "Corrupt JPEG data: found marker 0xd9 instead of RST3",
                   "Invalid JPEG file structure: two SOI markers", "something libjpeg may say one day"):
        assert not jpeg_warnings.is_benign(damage), damage


@pytest.mark.parametrize("name", STRICT)
@pytest.mark.parametrize("kind", sorted(BENIGN))
def test_strict_decoders_decode_benign_files_completely_and_note_the_warning(photo, name, kind):
    decoder = strict_decoder(name)
    clean = decoder.decode(photo)
    jpeg_warnings.take()
    image = decoder.decode(BENIGN[kind](photo))
    noted = jpeg_warnings.take()
    if name == "turbojpeg" and kind == "bad-icc":  # the system libturbojpeg 2.x never reads the ICC chunks
        assert noted in (None, libjpeg_warning(BENIGN[kind](photo)))
    else:
        assert noted == libjpeg_warning(BENIGN[kind](photo))
    np.testing.assert_array_equal(image, clean)   # nothing was lost: the bytes skipped held no pixels
    assert jpeg_warnings.take() is None


@pytest.mark.parametrize("name", STRICT)
@pytest.mark.parametrize("kind", sorted(DAMAGED))
def test_strict_decoders_still_refuse_real_damage(plain_photo, name, kind):
    with pytest.raises(DecodeError):
        strict_decoder(name).decode(DAMAGED[kind](plain_photo))


@pytest.fixture(scope="module")
def folder(photo, plain_photo, tmp_path_factory):
    root = tmp_path_factory.mktemp("warning_folder")
    (root / "good").mkdir()
    (root / "good" / "clean.jpg").write_bytes(photo)
    for kind, make in BENIGN.items():
        (root / "good" / f"{kind}.jpg").write_bytes(make(photo))
    (root / "bad").mkdir()
    (root / "bad" / "clean.jpg").write_bytes(photo)
    for kind, make in DAMAGED.items():
        (root / "bad" / f"{kind}.jpg").write_bytes(make(plain_photo))
    return root


@pytest.mark.parametrize("fmt", ["lmdb", "h5"])
def test_pack_verify_info_and_the_loader_agree(folder, tmp_path, fmt):
    out = tmp_path / f"out.{fmt}"
    report = pack(str(folder), str(out), PackOptions(check="decode", progress=False))
    assert sorted(s.path for s in report.skipped) == ["bad/cut-short.jpg", "bad/flipped-bits.jpg"]
    assert report.packed == 2 + len(BENIGN) and report.jpeg_warnings == len(BENIGN)
    assert any("harmless libjpeg warning" in line and line.endswith(f": {len(BENIGN)}")
               for line in report.summary_lines())
    info = describe(str(out))
    assert info.jpeg_warnings == len(BENIGN) and "jpeg warnings" in format_info(info)
    assert json.loads(json.dumps(info.to_dict()))["jpeg_warnings"] == len(BENIGN)
    result = verify(str(out), jobs=2)
    assert result.ok, [str(p) for p in result.problems]
    assert result.jpeg_warnings == len(BENIGN) and "harmless libjpeg warning" in result.summary()


def loader_bad_paths(source) -> list[str]:
    loader = FeedLoader(str(source), batch_size=2, size=32, device="cpu", on_error="substitute")
    assert loader.source.decoder.strict
    for _ in loader:
        pass
    return sorted(r.path for r in loader.stats.bad_records)


def test_a_default_pack_keeps_damage_for_verify_and_the_loader_to_find(folder, tmp_path):
    out = tmp_path / "headers.lmdb"
    report = pack(str(folder), str(out), PackOptions(progress=False))
    assert describe(str(out)).jpeg_warnings is None   # nothing decoded: nothing counted
    stored_damage = sorted({"bad/cut-short.jpg", "bad/flipped-bits.jpg"} - {s.path for s in report.skipped})
    assert "bad/flipped-bits.jpg" in stored_damage      # the header check cannot see it
    result = verify(str(out), jobs=2)
    assert sorted(p.path for p in result.problems) == stored_damage
    assert result.jpeg_warnings == len(BENIGN)
    assert loader_bad_paths(out) == stored_damage
    assert loader_bad_paths(folder) == ["bad/cut-short.jpg", "bad/flipped-bits.jpg"]



def test_a_grid_pack_keeps_a_benign_warning_and_counts_it(photo, plain_photo, tmp_path):
    """--layout grid transcodes every JPEG, so it meets the warnings --check decode meets and
    applies the same rule: damage is skipped as corrupt, a benign warning keeps the record (its
    pixels whole) and is counted. (bad-exif-length is left out: the grid's structure check
    refuses junk between segments before libjpeg sees it.)"""
    from feedline.stores import open_dataset
    src = tmp_path / "src"
    for rel, data in {"good/clean.jpg": photo, "good/extraneous.jpg": extraneous_before_restart(photo),
                      "good/jfif.jpg": unknown_jfif(photo), "bad/cut-short.jpg": cut_short(plain_photo),
                      "bad/flipped-bits.jpg": flipped_bits(plain_photo)}.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    out = tmp_path / "grid.lmdb"
    report = pack(str(src), str(out), PackOptions(layout="grid", progress=False))
    assert sorted(s.path for s in report.skipped) == ["bad/cut-short.jpg", "bad/flipped-bits.jpg"]
    assert [s.reason.value for s in report.skipped if s.path == "bad/flipped-bits.jpg"] == ["corrupt"]
    assert report.packed == 3 and report.jpeg_warnings == 2 and describe(str(out)).jpeg_warnings == 2
    with open_dataset(str(out)) as store:
        record = bytes(store.read([store.path(i) for i in range(len(store))].index("good/extraneous.jpg")))
    assert np.array_equal(simplejpeg.decode_jpeg(record, "rgb"),
                          simplejpeg.decode_jpeg(extraneous_before_restart(photo), "rgb", strict=False))
