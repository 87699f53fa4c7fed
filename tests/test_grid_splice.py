"""The restart-marker grid splice: a crop's MCUs spliced into a JPEG decode to the full
decode's crop, on real photos, every subsampling, odd sizes and every edge; damaged
records are a DecodeError."""
from __future__ import annotations

import io
import random

import numpy as np
import pytest
import simplejpeg
from PIL import Image

from feedline.decoders.base import Box
from feedline.decoders.jpeg_grid import CONTEXT, mcu_span, parse_grid, splice, splice_crop, with_context
from feedline.core.errors import DecodeError
from feedline.sample import photo_paths

SUBSAMPLING = {"444": 0, "422": 1, "420": 2}


def photo(width: int, height: int, index: int = 0) -> Image.Image:
    with Image.open(photo_paths()[index]) as im:
        return im.convert("RGB").resize((width, height), Image.BILINEAR)


def grid_jpeg(image: Image.Image, subsampling: str = "420", quality: int = 90) -> bytes:
    out = io.BytesIO()
    kw = {} if image.mode == "L" else {"subsampling": SUBSAMPLING[subsampling]}
    image.save(out, "JPEG", quality=quality, restart_marker_blocks=1, **kw)
    return out.getvalue()


def spliced_crop(data: bytes, box: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(the crop of the spliced JPEG's decode, the mask of its pixels away from a spliced edge)."""
    layout = parse_grid(data)
    top, left, h, w = box
    own = mcu_span(layout, top, left, h, w)
    (r0, r1), (c0, c1) = with_context(layout, Box(*box), *own)
    # the box's own MCUs, and a neighbour only where an edge of the box is near its MCU's edge
    assert own[0] - r0 in (0, 1) and r1 - own[1] in (0, 1) and own[2] - c0 in (0, 1) and c1 - own[3] in (0, 1)
    assert (own[0] == r0) == (top - own[0] * layout.mcu_height >= CONTEXT or own[0] == 0)
    spliced = splice(data, layout, (r0, r1), (c0, c1))
    decoded = simplejpeg.decode_jpeg(spliced, "rgb", strict=True)
    assert decoded.shape[:2] == (min(r1 * layout.mcu_height, layout.height) - r0 * layout.mcu_height,
                                 min(c1 * layout.mcu_width, layout.width) - c0 * layout.mcu_width)
    y0, x0 = r0 * layout.mcu_height, c0 * layout.mcu_width
    # splice_crop, what the decoders call, gives the same JPEG and places the box in it so
    assert splice_crop(data, np.array(box)) == (spliced, (top - y0, left - x0, h, w), decoded.shape[:2])
    ys, xs = np.arange(top, top + h)[:, None], np.arange(left, left + w)[None, :]
    # Chroma upsampling blends neighbours: near an edge the splice made (not an image edge)
    # the spliced JPEG has no neighbour to blend with.
    away = ((ys >= y0 + 2) | (y0 == 0)) & ((ys < min(r1 * layout.mcu_height, layout.height) - 2) |
                                          (r1 == layout.mcus_down)) \
        & ((xs >= x0 + 2) | (x0 == 0)) & ((xs < min(c1 * layout.mcu_width, layout.width) - 2) |
                                         (c1 == layout.mcus_across))
    return decoded[top - y0:top - y0 + h, left - x0:left - x0 + w], away


def check_crop(data: bytes, full: np.ndarray, box, subsampled: bool) -> None:
    crop, away = spliced_crop(data, box)
    top, left, h, w = box
    expected = full[top:top + h, left:left + w]
    assert crop.shape == expected.shape
    diff = np.abs(crop.astype(int) - expected.astype(int))
    # the neighbouring MCUs spliced along where chroma upsampling needs them: exact everywhere
    assert diff.max() == 0, (box, subsampled, diff[~away].max(initial=0))


def boxes(height: int, width: int, mcu: tuple[int, int], rng: random.Random):
    """Crops touching every edge, one-MCU crops, the whole image, and random ones."""
    mh, mw = mcu
    yield 0, 0, height, width
    yield 0, 0, 1, 1
    yield height - 1, width - 1, 1, 1
    yield 0, width - 5, 7, 5
    yield height - 9, 0, 9, 11
    yield mh, mw, mh, mw                                   # exactly one MCU
    yield (height // mh - 1) * mh, (width // mw - 1) * mw, mh, mw
    yield 3, 0, height - 3, width                          # touches left, right, bottom
    for _ in range(40):
        h, w = rng.randint(1, height), rng.randint(1, width)
        yield rng.randint(0, height - h), rng.randint(0, width - w), h, w


@pytest.mark.parametrize("subsampling", ["444", "422", "420"])
@pytest.mark.parametrize("size", [(333, 251), (500, 375), (17, 9), (33, 40)])
def test_spliced_crops_match_the_full_decode(subsampling, size):
    data = grid_jpeg(photo(*size), subsampling)
    full = simplejpeg.decode_jpeg(data, "rgb", strict=True)
    layout = parse_grid(data)
    assert (layout.height, layout.width) == (size[1], size[0])
    assert (layout.mcu_height, layout.mcu_width) == {"444": (8, 8), "422": (8, 16), "420": (16, 16)}[subsampling]
    for box in boxes(size[1], size[0], (layout.mcu_height, layout.mcu_width), random.Random(size[0])):
        if box[0] + box[2] > size[1] or box[1] + box[3] > size[0] or min(box) < 0:
            continue    # a fixed box that does not fit a tiny image
        check_crop(data, full, box, subsampled=subsampling != "444")


def test_gray_crops_are_exact():
    data = grid_jpeg(photo(301, 203, 1).convert("L"))
    full = simplejpeg.decode_jpeg(data, "rgb", strict=True)
    layout = parse_grid(data)
    assert (layout.mcu_height, layout.mcu_width) == (8, 8)
    for box in boxes(203, 301, (8, 8), random.Random(3)):
        check_crop(data, full, box, subsampled=False)


def test_one_mcu_image_splices_to_itself():
    data = grid_jpeg(photo(8, 8), "444")
    layout = parse_grid(data)
    assert len(layout.markers) == 0
    assert splice(data, layout, (0, 1), (0, 1)) == data


def test_whole_image_splice_keeps_every_interval():
    data = grid_jpeg(photo(120, 90), "420")
    layout = parse_grid(data)
    whole = splice(data, layout, (0, layout.mcus_down), (0, layout.mcus_across))
    assert whole == data   # the same markers, numbered as the encoder numbered them


@pytest.fixture(scope="module")
def record() -> bytes:
    return grid_jpeg(photo(200, 150, 2), "420")


def damaged(data: bytes, at: int, value: int) -> bytes:
    out = bytearray(data)
    out[at] = value
    return bytes(out)


def test_a_jpeg_without_the_grid_is_refused():
    out = io.BytesIO()
    photo(64, 48).save(out, "JPEG", quality=90)
    with pytest.raises(DecodeError, match="restart interval None"):
        parse_grid(out.getvalue())
    out = io.BytesIO()
    photo(64, 48).save(out, "JPEG", quality=90, restart_marker_blocks=2)
    with pytest.raises(DecodeError, match="restart interval 2"):
        parse_grid(out.getvalue())
    out = io.BytesIO()
    photo(64, 48).save(out, "JPEG", quality=90, progressive=True, restart_marker_blocks=1)
    with pytest.raises(DecodeError, match="not baseline"):
        parse_grid(out.getvalue())
    with pytest.raises(DecodeError, match="start-of-image"):
        parse_grid(b"\x89PNG\r\n\x1a\n" + bytes(40))


def test_damaged_markers_are_a_decode_error(record):
    layout = parse_grid(record)
    first, middle = int(layout.markers[0]), int(layout.markers[len(layout.markers) // 2])
    for bad, why in [(damaged(record, middle + 1, 0xD0 + (record[middle + 1] - 0xD0 + 1) % 8), "sequence"),
                     (damaged(record, first, 0x00), "restart markers for"),
                     (damaged(record, first + 1, 0x00), "restart markers for"),
                     (record[:-2], "end-of-image"),
                     (record[:middle] + record[-2:], "restart markers for"),
                     (record[:layout.scan_at - 5], "bad length"),
                     (record[:layout.sof_at + 2], "past the end")]:
        with pytest.raises(DecodeError, match=why):
            parse_grid(bad)


def test_damaged_headers_are_a_decode_error(record):
    layout = parse_grid(record)
    sof = layout.sof_at
    for bad in [damaged(record, sof + 3, 0xFF),            # SOF length past the record
                damaged(record, sof + 6, 0),               # a height of 0 ... or of 256 rows
                damaged(record, sof + 11, 0x00),           # sampling factors 0
                damaged(record, 2, 0x12)]:                 # not a marker where one must be
        with pytest.raises(DecodeError):
            layout2 = parse_grid(bad)
            splice(bad, layout2, (0, layout2.mcus_down), (0, layout2.mcus_across))


def test_every_byte_damaged_in_the_headers_never_crashes(record):
    """Any one byte of the headers changed: an error or a JPEG that decodes strictly or
    fails with a DecodeError/ValueError, never a crash or a read past the record."""
    layout = parse_grid(record)
    for at in range(layout.scan_at):
        for value in (0x00, 0xFF, record[at] ^ 0x10):
            bad = damaged(record, at, value)
            try:
                lay = parse_grid(bad)
                spliced = splice(bad, lay, (0, 1), (0, lay.mcus_across))
            except DecodeError:
                continue
            try:
                simplejpeg.decode_jpeg(spliced, "rgb", strict=True)
            except ValueError:
                pass


def test_a_box_outside_the_image_is_a_decode_error(record):
    layout = parse_grid(record)
    with pytest.raises(DecodeError, match="not inside"):
        mcu_span(layout, 100, 0, 51, 10)
    with pytest.raises(DecodeError, match="outside"):
        splice(record, layout, (0, layout.mcus_down + 1), (0, 1))
