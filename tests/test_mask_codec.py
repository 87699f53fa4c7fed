"""The stored mask (deflate-coded bands of rows): round trips, a band decoded alone, damage
found and never read past, and the mask files pack reads (8-, 16-bit, palette; colour refused)."""
from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from feedline.dataset.mask_codec import MaskError, decode, encode, read_png, shape_of, values_of


def png(array, mode: str | None = None, palette: bool = False) -> bytes:
    im = Image.fromarray(array) if mode is None else Image.fromarray(array).convert(mode)
    if palette:
        im = im.convert("P")
    out = io.BytesIO()
    im.save(out, "PNG")
    return out.getvalue()


@pytest.mark.parametrize("dtype, top", [(np.uint8, 255), (np.uint16, 65535)])
def test_a_mask_round_trips_and_any_rows_decode_alone(dtype, top):
    rng = np.random.default_rng(0)
    mask = rng.integers(0, top + 1, (77, 91)).astype(dtype)
    data = encode(mask, band_rows=8)
    assert shape_of(data) == (77, 91, np.dtype(dtype))
    assert decode(data).dtype == dtype and np.array_equal(decode(data), mask)
    for first, stop in [(0, 1), (7, 9), (8, 16), (13, 77), (76, 77), (30, 30)]:
        assert np.array_equal(decode(data, first, stop), mask[first:stop])
    with pytest.raises(ValueError, match="rows 70..79 are not within"):
        decode(data, 70, 80)


def test_only_the_bands_a_crop_crosses_are_read():
    """A band that is not asked for is not inflated: garbage there goes unnoticed."""
    mask = np.arange(40 * 10, dtype=np.uint8).reshape(40, 10)
    data = bytearray(encode(mask, band_rows=10))
    ends = np.frombuffer(bytes(data[16:32]), "<u4")
    start = 16 + 16
    data[start + ends[2] + 2] ^= 0xFF   # inside band 3 (rows 30..39)
    assert np.array_equal(decode(bytes(data), 5, 25), mask[5:25])
    with pytest.raises(MaskError, match="band 3 .* it is damaged"):
        decode(bytes(data), 25, 35)


def test_a_band_that_inflates_to_more_than_its_rows_is_damage_not_a_larger_read():
    head = struct.pack("<4sBBHII", b"FLMK", 1, 1, 4, 4, 4)
    bomb = zlib.compress(b"\0" * 10_000)   # a stream of 10 kB where 16 bytes belong
    data = head + np.array([len(bomb)], "<u4").tobytes() + bomb
    with pytest.raises(MaskError, match="band 0 of a stored mask inflates past its 16 bytes: it is damaged"):
        decode(data)


@pytest.mark.parametrize("data, words", [(b"", "shorter than its header"), (b"NOPE" + bytes(12), "header"),
                                         (struct.pack("<4sBBHII", b"FLMK", 1, 1, 4, 8, 4), "band table")])
def test_a_damaged_header_is_a_mask_error(data, words):
    with pytest.raises(MaskError, match=words):
        decode(data)


def test_mask_files_of_8_and_16_bits_and_a_palettes_indices():
    gray = np.array([[0, 1], [2, 255]], np.uint8)
    assert np.array_equal(read_png(png(gray), "m.png"), gray)
    wide = np.array([[0, 1000], [65535, 7]], np.uint16)
    got = read_png(png(wide), "m.png")
    assert got.dtype == np.uint16 and np.array_equal(got, wide)
    voc = Image.fromarray(np.array([[0, 15], [255, 3]], np.uint8), mode="P")   # VOC: classes as palette indices
    voc.putpalette([v for k in range(256) for v in (k, 255 - k, 7)])
    out = io.BytesIO()
    voc.save(out, "PNG")
    assert np.array_equal(read_png(out.getvalue(), "m.png"), [[0, 15], [255, 3]])


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "LA"])
def test_a_colour_mask_is_refused_saying_what_to_save(mode):
    with pytest.raises(MaskError, match=f"m.png: a {mode} image .* grayscale"):
        read_png(png(np.zeros((4, 4), np.uint8), mode), "m.png")


def test_a_file_that_is_no_image_is_refused():
    with pytest.raises(MaskError, match="m.png: not an image Pillow can read"):
        read_png(b"not a png", "m.png")


def test_values_are_the_distinct_classes_in_order():
    assert values_of(np.array([[3, 0], [3, 300]], np.uint16)).tolist() == [0, 3, 300]
