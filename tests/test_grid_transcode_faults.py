"""Structurally broken JPEGs and the grid transcode (issue 24): the faults libjpeg-turbo
stops on with a fatal error are refused before it by `jpeg_structure` (no parked thread),
sound files of every kind pass, and a fatal error that gets through anyway parks one
worker, leaves the transcoder working, and past MAX_PARKED stops the pack clearly."""
from __future__ import annotations

import io
import random

import cv2
import numpy as np
import pytest
import simplejpeg
from PIL import Image

from converters import PackOptions, pack
from converters import libjpeg_transcode as transcode
from converters.jpeg_structure import StructureError, check_structure
from feedline.core.errors import PackError
from feedline.sample import make_image, photo_paths


def resave(jpeg: bytes, **save) -> bytes:
    out = io.BytesIO()
    Image.open(io.BytesIO(jpeg)).save(out, "JPEG", quality=90, **save)
    return out.getvalue()


@pytest.fixture(scope="module")
def photo() -> bytes:
    return make_image(random.Random(2), cv2.imread(photo_paths()[0], cv2.IMREAD_COLOR), gray_fraction=0,
                      sizes=[(300, 225)])


def segment_at(data: bytes, code: int, after: int = 0) -> int:
    return data.index(bytes([0xFF, code]), after)


def without_segments(data: bytes, code: int) -> bytes:
    while bytes([0xFF, code]) in data[:segment_at(data, 0xDA)]:
        at = segment_at(data, code)
        data = data[:at] + data[at + 2 + (data[at + 2] << 8 | data[at + 3]):]
    return data


def broken(photo: bytes) -> dict[str, tuple[bytes, str]]:
    """name -> (a JPEG libjpeg-turbo stops on with a fatal error, what check_structure says)."""
    progressive = resave(photo, progressive=True)
    second_scan = segment_at(progressive, 0xDA, segment_at(progressive, 0xDA) + 2)
    cases = {"no DQT": (without_segments(photo, 0xDB), "quantization table 0 was not defined")}

    def edit(name, data, at, new, why):
        out = bytearray(data)
        out[at:at + len(new)] = new
        cases[name] = (bytes(out), why)

    edit("SOS names Huffman table 3", photo, segment_at(photo, 0xDA) + 6, b"\x33", "Huffman table 0/3 was not def")
    edit("a SOF inside the data", photo, len(photo) // 2, b"\xff\xc0", "two SOF markers")
    edit("an unknown marker inside the data", photo, len(photo) // 2, b"\xff\x02\x00\x04\x00\x00",
         "unknown marker FF02")
    edit("bad progression", progressive, second_scan + 2 + (progressive[second_scan + 3]) - 3, b"\x46",
         "invalid progressive parameters")
    edit("a scan of component 9", progressive, second_scan + 5, b"\x09", r"invalid component IDs \[9\]")
    edit("bogus Huffman counts", photo, segment_at(photo, 0xC4) + 5, bytes([255] * 16), "bogus Huffman table")
    cases["no image"] = (b"\xff\xd8\xff\xd9", "contains no image")
    return cases


def test_every_fatal_fault_is_refused_before_libjpeg(photo):
    parked = transcode._parked
    for name, (data, why) in broken(photo).items():
        with pytest.raises(StructureError, match=why):
            check_structure(data)
        with pytest.raises(transcode.TranscodeError, match="broken JPEG structure"):
            transcode.transcode_to_grid(data)
    assert transcode._parked == parked, "a fatal libjpeg error got through"


def test_sound_files_of_every_kind_pass(photo):
    image = simplejpeg.decode_jpeg(photo, "rgb")
    gray = np.ascontiguousarray(image[..., :1])
    ok, restarts = cv2.imencode(".jpg", image[..., ::-1], [cv2.IMWRITE_JPEG_RST_INTERVAL, 3,
                                                           cv2.IMWRITE_JPEG_OPTIMIZE, 1])
    assert ok
    sound = [photo, resave(photo, subsampling=0), resave(photo, subsampling=1), resave(photo, progressive=True),
             resave(photo, progressive=True, subsampling=0), restarts.tobytes(),
             simplejpeg.encode_jpeg(gray, colorspace="GRAY"), transcode.transcode_to_grid(photo)]
    for data in sound:
        check_structure(data)
        assert np.array_equal(simplejpeg.decode_jpeg(transcode.transcode_to_grid(data), "rgb"),
                              simplejpeg.decode_jpeg(data, "rgb"))


def test_a_fatal_error_that_gets_through_parks_one_worker_then_the_pack_stops(photo, monkeypatch):
    """A real fatal libjpeg error (an undefined Huffman table), the structure check bypassed."""
    data, _ = broken(photo)["SOS names Huffman table 3"]
    monkeypatch.setattr(transcode, "check_structure", lambda data: None)
    parked = transcode._parked
    with pytest.raises(transcode.TranscodeError, match="Huffman table 0x03 was not defined"):
        transcode.transcode_to_grid(data)
    assert transcode._parked == parked + 1
    assert np.array_equal(simplejpeg.decode_jpeg(transcode.transcode_to_grid(photo), "rgb"),
                          simplejpeg.decode_jpeg(photo, "rgb"))    # the next call gets a fresh worker
    monkeypatch.setattr(transcode, "MAX_PARKED", transcode._parked)
    with pytest.raises(PackError, match=r"fatal error \(the last: 'Huffman table 0x03.*--layout original"):
        transcode.transcode_to_grid(photo)


def test_pack_skips_a_structurally_broken_jpeg_as_corrupt(photo, tmp_path):
    src = tmp_path / "images"
    src.mkdir()
    (src / "good.jpg").write_bytes(photo)
    (src / "broken.jpg").write_bytes(broken(photo)["a SOF inside the data"][0])
    parked = transcode._parked
    report = pack(str(src), str(tmp_path / "out.lmdb"), PackOptions(progress=False, layout="grid"))
    assert report.packed == 1 and transcode._parked == parked
    [skip] = report.skipped
    assert (skip.path, skip.reason.value) == ("broken.jpg", "corrupt") and "two SOF markers" in skip.detail
