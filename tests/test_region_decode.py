"""Same data, less work: every backend's decode_into gives the crop PIL gives.

Oracle, independent of feedline's crop and resize code: PIL decodes the image (at 1/2,
1/4 or 1/8 scale in the DCT domain, through its draft mode, when the crop is at least
twice that many times the output in both directions), resizes the box with its antialiased
BILINEAR filter (torchvision's Resize on PIL images), and mirrors it. A box of ints is cut out
first (torchvision's resized_crop; after a DCT reduction, the scaled pixels that cover it);
a box of floats (the evaluation crop) is a fractional region of the whole image. Boxes come
from feedline.planning.augment (RandomResizedCrop for training, center crop for evaluation) plus crops
that touch every edge. Images are real photos at odd sizes, gray, 4:2:0 / 4:2:2 / 4:4:4 and
progressive. The bound: a mean absolute difference under 0.01 in normalized units
((x / 255 - mean) / std), about half a grey level, where a one-pixel shift of the crop gives
about 0.1.
"""
from __future__ import annotations

import io
import math
import random

import cv2
import numpy as np
import pytest
from PIL import Image

from feedline.planning.augment import center_crop, random_resized_crop, uniforms
from feedline.decoders import get_decoder
from feedline.decoders.base import Box
from feedline.sample import make_image, photo_paths

STD = np.array([0.229, 0.224, 0.225])       # ImageNet's, as the loader normalizes
BOUND = 0.01                                # normalized units
# (name, options): the default of each backend, and nvimgcodec's own region decode.
BACKENDS = [("nvimgcodec", {}), ("nvimgcodec", {"strict": False}), ("turbojpeg", {}), ("opencv", {}),
            ("pil", {})]
IDS = ["nvimgcodec", "nvimgcodec-region", "turbojpeg", "opencv", "pil"]


def _reencode(jpeg: bytes, **save) -> bytes:
    buf = io.BytesIO()
    Image.open(io.BytesIO(jpeg)).save(buf, "JPEG", quality=90, **save)
    return buf.getvalue()


@pytest.fixture(scope="module")
def photos() -> dict[str, bytes]:
    """Photo-like JPEGs: odd sizes (width x height), gray, each subsampling, progressive."""
    srcs = [cv2.imread(p, cv2.IMREAD_COLOR) for p in photo_paths()[:4]]
    rng = random.Random(3)

    def photo(size, k, gray=0.0):
        return make_image(rng, srcs[k % len(srcs)], gray_fraction=gray, sizes=[size])

    base = photo((500, 333), 0)
    return {
        "500x333": base,
        "333x500": photo((333, 500), 1),
        "301x199": photo((301, 199), 2),
        "199x301-gray": photo((199, 301), 3, gray=1.0),
        "640x480-444": _reencode(photo((640, 480), 1), subsampling=0),
        "500x333-422": _reencode(base, subsampling=1),
        "500x333-420-progressive": _reencode(base, subsampling=2, progressive=True),
        "1024x768": photo((1024, 768), 2),
    }


def boxes_for(h: int, w: int, out: int, seed: int) -> list[Box]:
    """Training and evaluation boxes from feedline.planning.augment, then crops at every edge."""
    train = random_resized_crop([h] * 6, [w] * 6, uniforms(seed, 0, range(6), 22))
    evaluation = center_crop([h], [w], (out, out))
    edges = [(0, 0, h // 2, w // 3), (h - h // 3, w - w // 2, h // 3, w // 2), (0, 0, h, w),
             (0, 0, 1, w), (h - 1, 0, 1, w), (0, 0, h, 1), (0, w - 1, h, 1), (h - 9, w - 7, 9, 7)]
    return [Box(*map(int, b)) for b in [*train, *edges]] + [Box(*map(float, b)) for b in evaluation]


def reduction(box: Box, out: int) -> int:
    """The DCT-domain reduction the backends take: the largest of 1/8, 1/4, 1/2 that keeps
    the scaled crop at least twice the output size."""
    return next((d for d in (8, 4, 2) if box.height >= 2 * d * out and box.width >= 2 * d * out), 1)


def pil_oracle(data: bytes, box: Box, flip: bool, out: int) -> np.ndarray:
    """PIL's decode at that reduction (its draft mode), the box cut out (ints) or as an
    exact fractional region of the whole image (floats), PIL's BILINEAR resize, the mirror."""
    im = Image.open(io.BytesIO(data))
    full_w, full_h = im.size
    d = reduction(box, out)
    if d > 1:
        im.draft("RGB", (full_w // d, full_h // d))
        assert im.size == (-(-full_w // d), -(-full_h // d)), "PIL did not decode at the scale asked"
    im = im.convert("RGB")
    # Scaled pixel j covers source pixels [d * j, d * j + d): the last one may be partial.
    left, top, right, bottom = (v / d for v in (box.left, box.top, box.left + box.width, box.top + box.height))
    if isinstance(box.top, int):   # cut out: the scaled pixels that cover the crop
        cut = (math.floor(left), math.floor(top), math.ceil(right), math.ceil(bottom))
        im = im.crop(cut)
        left, right, top, bottom = left - cut[0], right - cut[0], top - cut[1], bottom - cut[1]
    result = np.asarray(im.resize((out, out), Image.BILINEAR, box=(left, top, right, bottom)))
    return result[:, ::-1] if flip else result


def normalized_mad(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape and a.dtype == b.dtype == np.uint8
    return float((np.abs(a.astype(np.float64) - b) / 255 / STD).mean())


def _size(data: bytes) -> tuple[int, int]:
    w, h = Image.open(io.BytesIO(data)).size
    return h, w


def test_the_photos_are_what_the_cases_say(photos):
    for name, data in photos.items():
        im = Image.open(io.BytesIO(data))
        assert "x".join(map(str, im.size)) == name.split("-")[0]
        assert (im.mode == "L") == ("gray" in name)
        assert ("progressive" in name) == bool(im.info.get("progressive") or im.info.get("progression"))
    layers = {name: Image.open(io.BytesIO(photos[name])).layer for name in ("640x480-444", "500x333-422")}
    assert [h for _, h, _, _ in layers["640x480-444"]] == [1, 1, 1]
    assert [(h, v) for _, h, v, _ in layers["500x333-422"]] == [(2, 1), (1, 1), (1, 1)]


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
def test_decode_into_matches_the_pil_oracle(photos, backend):
    name, options = backend
    decoder = get_decoder(name, **options)
    mads = []
    for k, (case, data) in enumerate(photos.items()):
        h, w = _size(data)
        for out in (224, 64):   # 64: big crops take a DCT-domain reduction
            for i, box in enumerate(boxes_for(h, w, out, seed=k)):
                flip = bool((i + k) % 2)
                result = np.zeros((out, out, 3), np.uint8)
                decoder.decode_into(data, box, flip, result)
                mad = normalized_mad(result, pil_oracle(data, box, flip, out))
                assert mad < BOUND, (case, box, out, flip, mad)
                mads.append(mad)
    assert np.mean(mads) < BOUND / 5


@pytest.mark.parametrize("backend", BACKENDS[:-1], ids=IDS[:-1])
def test_decode_into_matches_decoder_pil(photos, backend):
    """Backend against backend: the same box and flip through decoder="pil"."""
    decoder, pil = get_decoder(backend[0], **backend[1]), get_decoder("pil")
    for k, data in enumerate(photos.values()):
        h, w = _size(data)
        for i, box in enumerate(boxes_for(h, w, 160, seed=10 + k)):
            a, b = np.zeros((160, 160, 3), np.uint8), np.zeros((160, 160, 3), np.uint8)
            decoder.decode_into(data, box, bool(i % 2), a)
            pil.decode_into(data, box, bool(i % 2), b)
            assert normalized_mad(a, b) < BOUND, (box, normalized_mad(a, b))


def test_a_one_pixel_shift_exceeds_the_bound(photos):
    """The bound can tell a misplaced crop: shifting the box by one pixel fails it."""
    data = photos["500x333"]
    box = Box(40, 60, 200, 200)
    shifted = np.zeros((224, 224, 3), np.uint8)
    get_decoder("nvimgcodec", strict=False).decode_into(data, Box(41, 61, 200, 200), False, shifted)
    assert normalized_mad(shifted, pil_oracle(data, box, False, 224)) > BOUND
