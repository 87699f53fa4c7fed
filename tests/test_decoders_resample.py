"""The decoders' pixels are torchvision's: Resize(R) + CenterCrop(S) for evaluation crops and
resized_crop for RandomResizedCrop's, antialiased, with torchvision's size and offset
arithmetic, against tests/fixtures/torchvision_resize.npz (made by torchvision itself with
tests/fixtures/make_torchvision_resize.py); and the resampling worked by hand."""
from __future__ import annotations

import os

import numpy as np
import pytest

from feedline.planning.augment import center_crop
from feedline.decoders import get_decoder
from feedline.decoders.base import Box, choose_scale, resize_scaled_into, source_region, whole_pixel_boxes
from feedline.decoders.resample import resample_into, span

FIXTURE = np.load(os.path.join(os.path.dirname(__file__), "fixtures", "torchvision_resize.npz"))
IMAGES = sorted(int(k.split("/")[1]) for k in FIXTURE if k.startswith("jpeg/"))
SIZE, WIDE = 48, (40, 56)
BACKENDS = ["simplejpeg", "opencv", "pil", "nvimgcodec", ("nvimgcodec", {"strict": False}), "turbojpeg"]


def decoder(backend):
    name, options = (backend, {}) if isinstance(backend, str) else backend
    try:
        return get_decoder(name, **options)
    except Exception as exc:  # noqa: BLE001 - an optional backend that is not installed here
        pytest.skip(f"{name}: {exc}")


def mean_levels(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def size_of(k: int) -> tuple[int, int]:
    from PIL import Image
    import io
    w, h = Image.open(io.BytesIO(FIXTURE[f"jpeg/{k}"].tobytes())).size
    return h, w


# -- the arithmetic ------------------------------------------------------------------------------

@pytest.mark.parametrize("name,size,crop_fraction", [("224", (224, 224), 0.875), ("wide", WIDE, 0.875),
                                                     ("tight", (160, 160), 1.0)])
def test_center_crop_is_torchvisions_resized_size_and_crop_corner(name, size, crop_fraction):
    """Box = (corner, crop) in resized pixels x source / resized pixels, exactly; torchvision's
    resized size and corner come from its own transforms (the fixture)."""
    shapes, table = FIXTURE["geometry/shapes"], FIXTURE[f"geometry/{name}"]
    boxes = center_crop(shapes[:, 0], shapes[:, 1], size, crop_fraction)
    checked = 0
    for (h, w), (rh, rw, top, left), box in zip(shapes.tolist(), table.tolist(), boxes.tolist()):
        if size[0] > rh or size[1] > rw:   # torchvision pads a crop larger than the resized image: feedline
            continue                        # keeps the axis whole
        want = [top * h / rh, left * w / rw, size[0] * h / rh, size[1] * w / rw]
        assert box == pytest.approx(want, rel=1e-12, abs=1e-9), (h, w)
        checked += 1
    assert checked >= 100


# -- the pixels ----------------------------------------------------------------------------------

def padded(k: int, size) -> bool:
    """Whether torchvision's CenterCrop(size) pads image k once resized (its shorter side to
    int(min(size) / 0.875), the longer in proportion)."""
    h, w = size_of(k)
    resized = int(min(size) / 0.875)
    rh, rw = (resized, int(resized * w / h)) if h <= w else (int(resized * h / w), resized)
    return size[0] > rh or size[1] > rw


def eval_pixels(dec, k: int, size) -> tuple[np.ndarray, tuple[int, int]]:
    data = FIXTURE[f"jpeg/{k}"].tobytes()
    h, w = size_of(k)
    box = Box(*center_crop([h], [w], size)[0].tolist())
    out = np.zeros((*size, 3), np.uint8)
    dec.decode_into(data, box, False, out)
    return out, choose_scale(box, size)


@pytest.mark.parametrize("backend", BACKENDS)
def test_evaluation_crops_are_torchvisions_resize_and_center_crop(backend):
    """Equal but for JPEG decoding rounding where the decode is full size; within half a grey
    level where the crop is four or more times the output and the JPEG is decoded at 1/2."""
    dec = decoder(backend)
    scaled = 0
    for k in IMAGES:
        for size, key in (((SIZE, SIZE), "eval"), (WIDE, "wide")):
            if padded(k, size):   # torchvision pads here; feedline keeps the axis whole
                continue
            got, scale = eval_pixels(dec, k, size)
            want = FIXTURE[f"{key}/{k}"]
            bound = 0.5 if scale != (1, 1) else 0.1
            assert mean_levels(got, want) < bound, (k, size, scale, mean_levels(got, want))
            assert mean_levels(got, FIXTURE[f"eval_pil/{k}"]) < bound + 0.1 if key == "eval" else True
            scaled += scale != (1, 1)
    assert scaled >= 1   # the DCT-scaled path was taken


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_resized_crops_are_torchvisions_resized_crop(backend):
    dec = decoder(backend)
    for k in IMAGES:
        data = FIXTURE[f"jpeg/{k}"].tobytes()
        for box, want in zip(FIXTURE[f"rrc_boxes/{k}"].tolist(), FIXTURE[f"rrc/{k}"]):
            got = np.zeros((SIZE, SIZE, 3), np.uint8)
            dec.decode_into(data, Box(*box), False, got)
            bound = 0.5 if choose_scale(Box(*box), (SIZE, SIZE)) != (1, 1) else 0.1
            assert mean_levels(got, want) < bound, (k, box, mean_levels(got, want))
            flipped = np.zeros_like(got)
            dec.decode_into(data, Box(*box), True, flipped)
            assert np.array_equal(flipped, got[:, ::-1])


def test_a_crop_off_by_one_pixel_is_told_apart():
    """The bound means something: the evaluation crop one source pixel to the right is far off."""
    k = IMAGES[0]
    h, w = size_of(k)
    top, left, bh, bw = center_crop([h], [w], (SIZE, SIZE))[0].tolist()
    out = np.zeros((SIZE, SIZE, 3), np.uint8)
    get_decoder("pil").decode_into(FIXTURE[f"jpeg/{k}"].tobytes(), Box(top, left + 1, bh, bw), False, out)
    assert mean_levels(out, FIXTURE[f"eval/{k}"]) > 1


# -- the resampling by hand ----------------------------------------------------------------------

def ramp() -> np.ndarray:
    """4 x 4, each row 0, 70, 140, 210 (the same in the three channels)."""
    return np.repeat(np.tile(np.array([0, 70, 140, 210], np.uint8), (4, 1))[:, :, None], 3, axis=2)


def test_a_2x_shrink_is_the_triangle_filter_by_hand():
    """Output pixel 0 is centred on source 1.0 and reads pixels 0, 1, 2 with triangle weights
    0.75, 0.75, 0.25 (half-width 2): (0 * 3 + 70 * 3 + 140) / 7 = 50; pixel 1, centred on 3.0,
    reads 1, 2, 3 (pixel 4 is past the edge: the filter is cut there and summed to one):
    (70 + 140 * 3 + 210 * 3) / 7 = 160. Rows are equal, so the vertical pass keeps them."""
    out = np.zeros((2, 2, 3), np.uint8)
    resample_into(ramp(), 0, 0, 4, 4, out)   # on the grid of a resize from the corner: torch's kernel
    assert out[:, :, 0].tolist() == [[50, 160], [50, 160]]


def test_the_filter_reads_the_image_past_the_regions_edge_by_hand():
    """The ramp 5 pixels into a black image: the region at column 5 is off the grid (5 / 2 is
    not whole: Pillow's kernel). Output 0, centred on 6.0, now reads black pixel 4 as well:
    (0 x 0.25 + 0 x 0.75 + 70 x 0.75 + 140 x 0.25) / 2 = 43.75 -> 44; output 1 as before."""
    wide = np.zeros((4, 9, 3), np.uint8)
    wide[:, 5:] = ramp()
    assert not span(5, 4, 2, 9).on_grid
    out = np.zeros((2, 2, 3), np.uint8)
    resample_into(wide, 0, 5, 4, 4, out)
    assert out[:, :, 0].tolist() == [[44, 160], [44, 160]]


def test_an_evaluation_region_reads_the_pixels_around_it():
    """Region [1, 3) of the ramp into 2 pixels (no shrink: bilinear at the centres 1.5 and 2.5,
    which fall between pixels) and into 1 pixel (a 2x shrink centred on 2.0 reading 0..3)."""
    out = np.zeros((1, 2, 3), np.uint8)
    resample_into(ramp(), 1.5, 1.0, 1.0, 2.0, out)
    assert out[0, :, 0].tolist() == [70, 140]                # centres on pixels 1 and 2 exactly
    one = np.zeros((1, 1, 3), np.uint8)
    resample_into(ramp(), 0, 1.0, 4, 2.0, one)
    # centre 2.0, half-width 2: pixels 0..3 weigh 0.25, 0.75, 0.75, 0.25 -> (0 + 52.5 + 105 + 52.5) / 2
    assert one[0, 0, 0] == 105


def test_both_implementations_agree_off_and_on_the_grid():
    rng = np.random.default_rng(1)
    image = rng.integers(0, 256, (90, 120, 3), dtype=np.uint8)
    for out_hw, region in (((30, 40), (10 * 1.25, 20 * 1.5, 30 * 1.25, 40 * 1.5)), ((50, 30), (3.5, 7.25, 70.5, 51.0))):
        a = np.zeros((*out_hw, 3), np.uint8)
        resample_into(image, *region, a)
        padded = np.zeros((95, 127, 3), np.uint8)
        padded[5:, 7:] = image
        b = np.zeros_like(a)
        resample_into(padded, region[0] + 5, region[1] + 7, *region[2:], b)   # filter clipped at the same edges?
        top, left = span(region[0], region[2], out_hw[0], 90), span(region[1], region[3], out_hw[1], 120)
        if top.first > 0 and left.first > 0:   # nowhere near the image's edges: the same pixels read
            assert np.abs(a.astype(int) - b).max() <= 1


def test_a_region_outside_the_image_is_a_decode_error():
    from feedline.core.errors import DecodeError
    with pytest.raises(DecodeError, match="not inside the 4x4 image"):
        resample_into(ramp(), 0, 0.5, 4, 4, np.zeros((2, 2, 3), np.uint8))
    with pytest.raises(DecodeError, match="not inside"):
        resize_scaled_into(ramp(), Box(0.0, 0.0, 4.5, 4.0), (1, 1), np.zeros((2, 2, 3), np.uint8), False)


def test_regions_to_decode_and_whole_pixel_crops():
    assert source_region(Box(10, 20, 30, 40), (8, 8), 100, 100) == Box(10, 20, 30, 40)   # ints: the crop
    # 30 -> 8 is a 3.75x shrink, the filter reaching 4.75 pixels out: rows floor(5.75) .. ceil(45.25);
    # 40 -> 8 a 5x one, reaching 6: columns floor(14.25) .. ceil(66.25)
    assert source_region(Box(10.5, 20.25, 30.0, 40.0), (8, 8), 100, 100) == Box(5, 14, 41, 53)
    assert source_region(Box(1.5, 1.0, 30.0, 40.0), (8, 8), 33, 45) == Box(0, 0, 33, 45)   # clipped
    assert whole_pixel_boxes(np.array([[23.4375, 85.04, 328.125, 328.44]])).tolist() == [[23, 85, 329, 328]]
