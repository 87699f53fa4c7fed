"""GridDecoder: the spliced crop, resized and flipped, is the crop a full decode gives
(issue 24's 0.05 bound in normalized units), at every DCT scale, on photos at odd sizes,
gray, each subsampling and progressive sources; a bad grid record is a DecodeError."""
from __future__ import annotations

import io
import random

import cv2
import numpy as np
import pytest
from PIL import Image

from converters.libjpeg_transcode import transcode_to_grid
from feedline.planning.augment import center_crop, random_resized_crop, uniforms
from feedline.decoders import jpeg_warnings
from feedline.decoders.base import Box
from feedline.decoders.grid_decoder import GridDecoder
from feedline.decoders.jpeg_grid import parse_grid
from feedline.decoders.simplejpeg_decoder import SimplejpegDecoder
from feedline.core.errors import DecodeError
from feedline.sample import make_image, photo_paths

STD = 255 * np.array([0.229, 0.224, 0.225])   # the loader's normalization, in uint8 levels
BOUND = 0.05                                   # mean absolute difference, normalized units


def resave(jpeg: bytes, **save) -> bytes:
    out = io.BytesIO()
    Image.open(io.BytesIO(jpeg)).save(out, "JPEG", quality=90, **save)
    return out.getvalue()


def declaring_2x2(gray_jpeg: bytes) -> bytes:
    """``gray_jpeg`` with its frame declaring 2x2 sampling for its one component: legal, and
    meaningless (a one-component scan is not interleaved: its MCU is one 8x8 block)."""
    data, at = bytearray(gray_jpeg), 2
    while data[at + 1] not in (0xC0, 0xC1):          # walk the segments to the frame
        at += 2 + (data[at + 2] << 8 | data[at + 3])
    assert data[at + 9] == 1, "not a one-component JPEG"
    data[at + 11] = 0x22
    return bytes(data)


@pytest.fixture(scope="module")
def sources() -> dict[str, bytes]:
    srcs = [cv2.imread(p, cv2.IMREAD_COLOR) for p in photo_paths()[:4]]
    rng = random.Random(8)

    def photo(size, k, gray=0.0):
        return make_image(rng, srcs[k % len(srcs)], gray_fraction=gray, sizes=[size])

    base, gray = photo((500, 333), 0), photo((199, 301), 2, gray=1.0)
    return {"500x333": base, "301x199": photo((301, 199), 1), "199x301-gray": gray,
            "199x301-gray-declaring-2x2": declaring_2x2(gray),
            "640x480-444": resave(photo((640, 480), 3), subsampling=0),
            "333x251-422": resave(photo((333, 251), 1), subsampling=1),
            "500x333-progressive": resave(base, subsampling=2, progressive=True),
            "1024x768": photo((1024, 768), 2)}


def boxes_for(h: int, w: int, out: int) -> list[Box]:
    train = random_resized_crop([h] * 12, [w] * 12, uniforms(4, 0, range(12), 22))
    edges = [(0, 0, h, w), (0, 0, 1, 1), (h - 1, w - 1, 1, 1), (0, 0, h, 1), (h - 9, w - 7, 9, 7),
             (16, 16, 16, 16), (h - h // 3, w - w // 2, h // 3, w // 2)]
    evaluation = center_crop([h], [w], (out, out))   # floats: the region of a resized image
    return [Box(*map(int, b)) for b in [*train, *evaluation, *edges]] + [Box(*map(float, b)) for b in evaluation]


@pytest.mark.parametrize("out", [224, 64, 20])   # 20: the 1/8 scale on most crops
def test_grid_crops_match_the_full_decodes(sources, out):
    full = SimplejpegDecoder()
    for name, source in sources.items():
        grid = transcode_to_grid(source)
        decoder = GridDecoder(full)
        h, w = full.decode(grid).shape[:2]
        for k, box in enumerate(boxes_for(h, w, out)):
            flip = bool(k % 2)
            expected, got = np.zeros((out, out, 3), np.uint8), np.zeros((out, out, 3), np.uint8)
            full.decode_into(grid, box, flip, expected)
            decoder.decode_into(grid, box, flip, got)
            diff = (np.abs(expected.astype(float) - got) / STD).mean()
            assert diff < BOUND, (name, box, flip, diff)


def test_whole_images_go_to_the_wrapped_decoder(sources):
    grid = transcode_to_grid(sources["301x199"])
    full = SimplejpegDecoder()
    assert np.array_equal(GridDecoder(full).decode(grid), full.decode(grid))


def test_a_record_without_the_grid_is_a_decode_error(sources):
    out = np.zeros((32, 32, 3), np.uint8)
    with pytest.raises(DecodeError, match="not a restart-grid JPEG"):
        GridDecoder(SimplejpegDecoder()).decode_into(sources["301x199"], Box(0, 0, 50, 50), False, out)
    with pytest.raises(DecodeError, match="not a restart-grid JPEG"):   # whole, as cropped
        GridDecoder(SimplejpegDecoder()).decode(sources["301x199"])


def test_damage_inside_a_spliced_interval_is_a_decode_error(sources):
    """Stray bytes inside the crop's entropy data: libjpeg warns on the spliced JPEG, and
    a warning is an error; the same damage outside the crop is never read."""
    grid = bytearray(transcode_to_grid(sources["500x333"]))
    layout = parse_grid(bytes(grid))
    k = 5 * layout.mcus_across + 5          # the MCU at row 5, column 5
    start, end = int(layout.markers[k - 1]) + 2, int(layout.markers[k])
    grid[start:end] = b"\xff\x13" * ((end - start) // 2) + b"\x00" * ((end - start) % 2)
    decoder, out = GridDecoder(SimplejpegDecoder()), np.zeros((32, 32, 3), np.uint8)
    mcu_h, mcu_w = layout.mcu_height, layout.mcu_width
    with pytest.raises(DecodeError, match="does not decode cleanly"):
        decoder.decode_into(bytes(grid), Box(5 * mcu_h, 5 * mcu_w, 2, 2), False, out)
    decoder.decode_into(bytes(grid), Box(0, 0, 4 * mcu_h, 4 * mcu_w), False, out)   # far from it: fine


def test_a_box_outside_the_image_is_a_decode_error(sources):
    grid = transcode_to_grid(sources["301x199"])
    out = np.zeros((32, 32, 3), np.uint8)
    with pytest.raises(DecodeError, match="not inside"):
        GridDecoder(SimplejpegDecoder()).decode_into(grid, Box(0, 0, 200, 10), False, out)


def test_a_benign_warning_on_a_spliced_crop_is_counted_not_a_bad_record(sources):
    """Junk bytes before a restart marker inside the crop (hopper_bad_exif's kind): libjpeg
    skips them, warns and decodes every pixel; as on every strict path that warning is
    counted (`jpeg_warnings`), and the crop is the clean record's."""
    clean = transcode_to_grid(sources["500x333"])
    layout = parse_grid(clean)
    k = 5 * layout.mcus_across + 5          # the MCU at row 5, column 5: junk before the marker after it
    at = int(layout.markers[k])
    junk = clean[:at] + b"\x00\x00\x00" + clean[at:]
    mcu_h, mcu_w = layout.mcu_height, layout.mcu_width
    box = Box(5 * mcu_h, 5 * mcu_w, 2 * mcu_h, 2 * mcu_w)
    decoder = GridDecoder(SimplejpegDecoder())
    want, got = np.zeros((32, 32, 3), np.uint8), np.zeros((32, 32, 3), np.uint8)
    decoder.decode_into(clean, box, False, want)
    assert jpeg_warnings.take() is None
    decoder.decode_into(junk, box, False, got)
    assert "extraneous bytes before marker" in (jpeg_warnings.take() or "")
    assert np.array_equal(got, want)


@pytest.fixture(scope="module")
def two_layouts(tmp_path_factory) -> tuple[str, str]:
    """The same 200 photos packed as they are and with the restart grid."""
    from converters import PackOptions, pack
    from feedline.sample import make_photo_folder
    root = tmp_path_factory.mktemp("layouts")
    src = str(root / "src")
    make_photo_folder(src, n=200, classes=4, seed=3)
    pack(src, str(root / "original.lmdb"))
    pack(src, str(root / "grid.lmdb"), PackOptions(layout="grid"))
    return str(root / "original.lmdb"), str(root / "grid.lmdb")


@pytest.mark.parametrize("train", [True, False])
def test_the_loaders_crops_of_a_grid_store_are_the_original_stores(two_layouts, train):
    """Through FeedLoader, every crop of 200 photos (random resized crops, or the center
    crops of evaluation) agrees with the original layout's to one level at most; without the
    neighbouring MCUs spliced along, edge pixels would differ by up to 0.3."""
    from feedline import FeedLoader

    def crops(path):
        with FeedLoader(path, batch_size=100, size=224, seed=5, train=train, num_workers=1,
                        decoder="simplejpeg") as loader:
            return torch.cat([x for x, _ in loader])

    import torch
    original, grid = crops(two_layouts[0]), crops(two_layouts[1])
    assert len(original) == 200
    diff = (original - grid).abs()
    assert diff.mean(dim=(1, 2, 3)).max() < BOUND / 100
    assert diff.max() <= 1.01 / 255 / 0.224   # one level of the channel with the smallest std
