"""Damaged JPEGs (valid headers, damaged image data) are a DecodeError, never a partly gray
image (issue 16 item 3), in every backend that can tell; the others say so.

The damage is made the way it happens: real photo JPEGs cut short, and bytes flipped in
the middle of the entropy-coded data (libjpeg-turbo then warns "Corrupt JPEG data" or
"Premature end of JPEG file" and would fill in gray). Zeroed bytes are not always
damage libjpeg can see: a run of zero bits is often valid Huffman code that ends in step
(here 2 of 3 photos with 256 zeroed bytes decode without a warning, to a wrong image);
only the record's checksum catches that, so zeroing is used for the lenient backends only.
"""
from __future__ import annotations

import numpy as np
import pytest

from feedline.decoders import damage_detection, get_decoder
from feedline.decoders.base import Box
from feedline.core.errors import DecodeError
from feedline.sample import make_photo_folder

STRICT = ["nvimgcodec", "turbojpeg"]      # detect corrupt data inside and cut-short files
LENIENT = ["opencv", "pil"]               # detect cut-short files only


def _entropy_start(data: bytes) -> int:
    sos = data.index(b"\xff\xda")
    return sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big")


def damaged(data: bytes) -> dict[str, bytes]:
    start, end = _entropy_start(data), len(data) - 2
    middle = (start + end) // 2
    zeroed, flipped = bytearray(data), bytearray(data)
    zeroed[middle:middle + 256] = bytes(256)
    for k in range(middle, middle + 16):
        flipped[k] ^= 0x5A
    return {"zeroed": bytes(zeroed), "flipped": bytes(flipped), "cut-short": data[:middle],
            "cut-before-end-marker": data[:-2]}


CUT = ("cut-short", "cut-before-end-marker")


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> list[bytes]:
    root = tmp_path_factory.mktemp("damage_photos")
    make_photo_folder(str(root), n=3, classes=1, seed=5, gray_fraction=0.0)
    return [p.read_bytes() for p in sorted(root.rglob("*.jpg"))]


def _check_damage_is_real(decoder, data: bytes, bad: bytes):
    """The damage changes the image, as a lenient decode shows (else the test proves nothing)."""
    try:
        clean, broken = decoder.decode(data), decoder.decode(bad)
    except DecodeError:
        return
    assert clean.shape == broken.shape and not np.array_equal(clean, broken)


@pytest.mark.filterwarnings("error")      # no UserWarning on the way: a DecodeError, nothing else
@pytest.mark.parametrize("name", STRICT)
def test_strict_backends_raise_on_every_kind_of_damage(photos, name):
    decoder = get_decoder(name)
    lenient = get_decoder("opencv")
    for data in photos:
        h, w = decoder.decode(data).shape[:2]
        for kind, bad in damaged(data).items():
            if kind == "zeroed":
                continue
            _check_damage_is_real(lenient, data, bad)
            with pytest.raises(DecodeError):
                decoder.decode(bad)
            out = np.zeros((64, 64, 3), np.uint8)
            for box in (Box(0, 0, h, w), Box(0, 0, h // 4, w // 4), Box(h - 40, w - 40, 40, 40)):
                with pytest.raises(DecodeError):
                    decoder.decode_into(bad, box, False, out)


@pytest.mark.parametrize("name", LENIENT)
def test_lenient_backends_raise_on_cut_short_files_and_say_what_they_miss(photos, name):
    decoder = get_decoder(name)
    for data in photos:
        for kind in CUT:
            with pytest.raises(DecodeError):
                decoder.decode(damaged(data)[kind])
        # Corrupt data inside decodes: documented, not silent in the docs.
        assert decoder.decode(damaged(data)["zeroed"]).shape == decoder.decode(data).shape
    assert "NOT detected" in damage_detection(name)


def test_nvimgcodec_region_decode_alone_catches_what_it_reads(photos):
    """strict=False is nvImageCodec's own region decode: a region that reaches cut-off rows
    is a DecodeError; corrupt data inside decodes (nvImageCodec ignores libjpeg's warnings)."""
    decoder = get_decoder("nvimgcodec", strict=False)
    data = photos[0]
    h, w = decoder.decode(data).shape[:2]
    out = np.zeros((h, w, 3), np.uint8)
    with pytest.raises(DecodeError):
        decoder.decode_into(damaged(data)["cut-short"], Box(0, 0, h, w), False, out)
    decoder.decode_into(damaged(data)["zeroed"], Box(0, 0, h, w), False, out)
    assert out.any()


def test_every_backend_states_its_damage_policy():
    for name in ("nvimgcodec", "turbojpeg", "opencv", "pil"):
        assert "DecodeError" in damage_detection(name)
    assert "warnings" in damage_detection("turbojpeg")
