"""converters.jpeg_header: what a JPEG is, from its markers alone."""
from __future__ import annotations

import io
import struct

import pytest
from PIL import Image

import helpers_images as imgs
from converters.jpeg_header import EOI_WINDOW, JpegError, exif_orientation, parse_jpeg
from converters.report import SkipReason


def _jpeg(**save) -> bytes:
    buf = io.BytesIO()
    mode = save.pop("mode", "RGB")
    im = Image.fromarray(imgs.pattern()) if mode == "RGB" else Image.fromarray(imgs.pattern()).convert(mode)
    im.save(buf, format="JPEG", quality=90, **save)
    return buf.getvalue()


def _insert_after_soi(data: bytes, segment: bytes) -> bytes:
    return data[:2] + segment + data[2:]


def _segment(marker: int, payload: bytes) -> bytes:
    return struct.pack(">BBH", 0xFF, marker, len(payload) + 2) + payload


@pytest.mark.parametrize("save, sof, components", [
    ({}, 0xC0, 3),
    ({"progressive": True}, 0xC2, 3),
    ({"mode": "L"}, 0xC0, 1),
])
def test_pass_through_kinds(save, sof, components):
    info = parse_jpeg(_jpeg(**save))
    assert (info.sof, info.components, info.precision) == (sof, components, 8)
    assert (info.height, info.width) == (imgs.H, imgs.W)
    assert info.orientation == 1 and not info.arithmetic
    assert info.conversion_reason() is None


def test_cmyk_needs_conversion():
    info = parse_jpeg(_jpeg(mode="CMYK"))
    assert info.components == 4 and info.adobe_transform is not None
    assert "CMYK" in info.conversion_reason()


def test_ycck_named():
    data = bytearray(_jpeg(mode="CMYK"))
    adobe = data.index(b"Adobe")
    data[adobe + 11] = 2  # PIL writes transform 0 (CMYK); 2 says YCCK
    info = parse_jpeg(bytes(data))
    assert (info.components, info.adobe_transform) == (4, 2)
    assert "YCCK" in info.conversion_reason()


def test_rgb_coded_needs_conversion():
    data = _insert_after_soi(_jpeg(), _segment(0xEE, b"Adobe\x00\x64\x00\x00\x00\x00\x00"))
    assert "RGB" in parse_jpeg(data).conversion_reason()


def test_exif_orientation_needs_conversion(tmp_path):
    imgs.exif_rotated_jpeg(str(tmp_path / "r.jpg"))
    info = parse_jpeg((tmp_path / "r.jpg").read_bytes())
    assert info.orientation == 6
    assert info.conversion_reason() == "EXIF orientation 6"


def test_exif_orientation_1_passes():
    exif = Image.Exif()
    exif[0x0112] = 1
    assert parse_jpeg(_jpeg(exif=exif.tobytes())).conversion_reason() is None


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("kind, fmt", [(3, "H2x"), (4, "I")])
def test_exif_orientation_parser(order, kind, fmt):
    mark = b"II" if order == "<" else b"MM"
    entry = struct.pack(order + "HHI" + fmt, 0x0112, kind, 1, 8)
    tiff = mark + struct.pack(order + "HI", 42, 8) + struct.pack(order + "H", 1) + entry
    assert exif_orientation(tiff) == 8


@pytest.mark.parametrize("tiff", [b"", b"XX\x00\x2a", b"II*\x00\xff\xff\x00\x00",
                                  b"II*\x00\x08\x00\x00\x00\x01\x00" + struct.pack("<HHI2x2x", 0x0112, 3, 1)])
def test_exif_orientation_unreadable_is_1(tiff):
    assert exif_orientation(tiff) == 1


def test_exif_orientation_out_of_range_is_1():
    tiff = b"II" + struct.pack("<HI", 42, 8) + struct.pack("<H", 1) + struct.pack("<HHIH2x", 0x0112, 3, 1, 9)
    assert exif_orientation(tiff) == 1


def test_twelve_bit_and_lossless(tmp_path):
    imgs.jpeg12_gray(str(tmp_path / "a.jpg"))
    imgs.jpeg_lossless_gray(str(tmp_path / "b.jpg"))
    twelve = parse_jpeg((tmp_path / "a.jpg").read_bytes())
    assert twelve.precision == 12 and twelve.conversion_reason() == "12-bit JPEG"
    lossless = parse_jpeg((tmp_path / "b.jpg").read_bytes())
    assert lossless.sof == 0xC3 and "lossless" in lossless.conversion_reason()


def test_arithmetic_coding_needs_conversion():
    data = _jpeg()
    sof = data.index(b"\xff\xc0")
    arithmetic_sof = data[:sof + 1] + b"\xc9" + data[sof + 2:]
    assert "arithmetic" in parse_jpeg(arithmetic_sof).conversion_reason()
    with_dac = _insert_after_soi(data, _segment(0xCC, b"\x00\x10"))
    info = parse_jpeg(with_dac)
    assert info.arithmetic and "arithmetic" in info.conversion_reason()


def test_trailing_padding_allowed():
    data = _jpeg() + b"\x00" * 1000
    assert parse_jpeg(data).conversion_reason() is None


def test_padding_longer_than_the_window_reads_as_truncated():
    with pytest.raises(JpegError) as err:
        parse_jpeg(_jpeg() + b"\x00" * (EOI_WINDOW + 10))
    assert err.value.reason is SkipReason.TRUNCATED


@pytest.mark.parametrize("cut", [3, 40, 300, -200, -2])
def test_truncated(cut):
    data = _jpeg()
    with pytest.raises(JpegError) as err:
        parse_jpeg(data[:cut])
    assert err.value.reason is SkipReason.TRUNCATED, err.value.detail


@pytest.mark.parametrize("data", [
    b"\xff\xd8\x13\x13\x13",                              # no marker after SOI
    b"\xff\xd8" + _segment(0xDA, b"\x01\x01\x00\x00\x3f\x00") + b"\xff\xd9",   # SOS before SOF
    b"\xff\xd8\xff\xe0\x00\x01" + b"\x00" * 20,           # segment length < 2
    b"\xff\xd8\xff\xd9",                                  # EOI before any image data
    b"\xff\xd8" + _segment(0xC0, struct.pack(">BHHB", 8, 0, 16, 1) + b"\x01\x11\x00") + b"\xff\xd9",
])
def test_corrupt(data):
    with pytest.raises(JpegError) as err:
        parse_jpeg(data)
    assert err.value.reason is SkipReason.CORRUPT, err.value.detail


def test_not_a_jpeg():
    with pytest.raises(JpegError) as err:
        parse_jpeg(b"\x89PNG\r\n\x1a\n")
    assert err.value.reason is SkipReason.NOT_AN_IMAGE


def test_real_photos_pass(tmp_path):
    from feedline.sample import make_photo_folder
    make_photo_folder(str(tmp_path), n=3, classes=1, gray_fraction=0.5, sizes=[(96, 64)])
    for path in sorted(tmp_path.rglob("*.jpg")):
        info = parse_jpeg(path.read_bytes())
        assert info.conversion_reason() is None
        assert (info.width, info.height) == (96, 64)


@pytest.mark.turbojpeg
def test_turbo_header_agrees_with_pyturbojpeg(tmp_path):
    from turbojpeg import TurboJPEG

    from converters.turbo_header import TurboHeader
    header, reference = TurboHeader(), TurboJPEG()
    for save in ({}, {"progressive": True}, {"mode": "L"}, {"mode": "CMYK"}, {"subsampling": 0}):
        data = _jpeg(**save)
        assert header(data) == reference.decode_header(data)
    with pytest.raises(OSError, match="Not a JPEG"):
        header(b"hello")
    # A header that only draws warnings reports zeros, not the previous call's values.
    header(_jpeg())
    assert header(b"\xff\xd8garbage")[:2] == (0, 0)
