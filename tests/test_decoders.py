"""Decoder backends and their registry, checked against PIL's plain decode of real photo-like JPEGs."""
from __future__ import annotations

import io
import logging
import random
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from feedline.decoders import selection
from feedline.decoders import available_decoders, decoder_names, get_decoder, missing_library_reason
from feedline.decoders.base import Box, choose_scale, crop_scaled, is_jpeg, resize_into, resize_scaled_into
from feedline.core.errors import BackendUnavailable, DecodeError
from feedline.sample import make_image, make_photo_folder, photo_paths

BACKENDS = ["nvimgcodec", "turbojpeg", "opencv", "pil"]


def _usable(name: str) -> bool:
    return available_decoders()[name] is None


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory) -> list[bytes]:
    """Six realistic JPEGs at ImageNet-like sizes (one 1024x768 among them, seed 1)."""
    root = tmp_path_factory.mktemp("decoder_photos")
    make_photo_folder(str(root), n=6, classes=2, seed=1)
    return [p.read_bytes() for p in sorted(root.rglob("*.jpg"))]


@pytest.fixture(scope="module")
def gray_jpeg() -> bytes:
    return make_image(random.Random(7), cv2.imread(photo_paths()[0], cv2.IMREAD_COLOR), gray_fraction=1.0)


@pytest.fixture(params=BACKENDS)
def decoder(request):
    # No skip: CI installs every backend (the turbojpeg extra and libturbojpeg0), so a
    # missing one is a failure, with the registry's reason.
    return get_decoder(request.param)


def pil_decode(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def pil_reference(data: bytes, box: Box, flip: bool, out_hw: tuple[int, int]) -> np.ndarray:
    """Crop PIL's decode, resize with PIL's antialiased bilinear filter, mirror."""
    im = Image.open(io.BytesIO(data)).convert("RGB")
    im = im.crop((box.left, box.top, box.left + box.width, box.top + box.height))
    result = np.asarray(im.resize((out_hw[1], out_hw[0]), Image.BILINEAR))
    return result[:, ::-1] if flip else result


def mean_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def cases(height: int, width: int) -> list[tuple[Box, tuple[int, int]]]:
    """(box, out size) pairs: big crops that DCT scaling shrinks, a middle one, an enlarged one."""
    return [
        (Box(10, 20, height - 30, width - 40), (56, 56)),              # 1/4 or 1/8
        (Box(height // 4, width // 4, height // 2, width // 2), (96, 112)),
        (Box(0, 0, height, width), (height // 2 + 3, width // 2 + 1)),  # just above 1/2: full scale
        (Box(5, 7, 100, 90), (160, 160)),                               # enlarged
    ]


# -- decode -------------------------------------------------------------------------

def test_decode_matches_pil(decoder, jpegs):
    for data in jpegs:
        image, reference = decoder.decode(data), pil_decode(data)
        assert image.dtype == np.uint8 and image.shape == reference.shape
        assert mean_abs_diff(image, reference) < 2


def test_decode_gray_jpeg_gives_three_equal_channels(decoder, gray_jpeg):
    assert Image.open(io.BytesIO(gray_jpeg)).mode == "L"
    image = decoder.decode(gray_jpeg)
    assert image.ndim == 3 and image.shape[2] == 3
    assert np.array_equal(image[..., 0], image[..., 1]) and np.array_equal(image[..., 0], image[..., 2])
    assert mean_abs_diff(image[..., 0], np.asarray(Image.open(io.BytesIO(gray_jpeg)))) < 2


def test_decode_accepts_memoryview(decoder, jpegs):
    # LMDB stores hand out memoryviews into the memory map.
    assert np.array_equal(decoder.decode(memoryview(jpegs[0])), decoder.decode(jpegs[0]))


CORRUPT = [b"", b"not an image at all", b"\xff\xd8" + b"\x00junk" * 40]
CORRUPT_IDS = ["empty", "text", "jpeg-start-then-junk"]


# libjpeg-turbo's warnings on the way to the error are expected here.
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("data", CORRUPT, ids=CORRUPT_IDS)
def test_corrupt_bytes_raise_decode_error(decoder, data):
    with pytest.raises(DecodeError):
        decoder.decode(data)
    with pytest.raises(DecodeError):
        decoder.decode_into(data, Box(0, 0, 8, 8), False, np.zeros((4, 4, 3), np.uint8))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_header_only_jpeg_raises_decode_error(decoder, jpegs):
    with pytest.raises(DecodeError):
        decoder.decode(jpegs[0][:300])


# -- decode_into --------------------------------------------------------------------

@pytest.mark.parametrize("flip", [False, True])
def test_decode_into_matches_pil_reference(decoder, jpegs, flip):
    for data in jpegs:
        h, w = pil_decode(data).shape[:2]
        for box, out_hw in cases(h, w):
            out = np.zeros(out_hw + (3,), np.uint8)
            decoder.decode_into(data, box, flip, out)
            assert mean_abs_diff(out, pil_reference(data, box, flip, out_hw)) < 5, (box, out_hw)


def test_decode_into_writes_into_a_batch_slot(decoder, jpegs):
    batch = np.zeros((3, 64, 48, 3), np.uint8)
    decoder.decode_into(jpegs[0], Box(0, 0, 200, 150), True, batch[1])
    assert batch[1].any() and not batch[0].any() and not batch[2].any()
    column = np.zeros((64, 2, 48, 3), np.uint8)   # a strided view: rows are not adjacent
    decoder.decode_into(jpegs[0], Box(0, 0, 200, 150), True, column[:, 1])
    assert np.array_equal(column[:, 1], batch[1]) and not column[:, 0].any()


def test_box_outside_the_image_is_a_decode_error(decoder, jpegs):
    h, w = pil_decode(jpegs[0]).shape[:2]
    with pytest.raises(DecodeError, match="not inside"):
        decoder.decode_into(jpegs[0], Box(h - 10, 0, 50, w), False, np.zeros((8, 8, 3), np.uint8))


@pytest.mark.turbojpeg
def test_backends_agree_with_each_other(jpegs):
    usable = [get_decoder(name) for name in BACKENDS]
    data = jpegs[2]
    h, w = pil_decode(data).shape[:2]
    for box, out_hw in cases(h, w):
        outs = []
        for dec in usable:
            out = np.zeros(out_hw + (3,), np.uint8)
            dec.decode_into(data, box, True, out)
            outs.append(out)
        for out in outs[1:]:
            assert mean_abs_diff(out, outs[0]) < 1


# -- DCT-domain scaling ---------------------------------------------------------------

def test_choose_scale_picks_the_strongest_reduction_that_keeps_twice_the_output_size():
    assert choose_scale(Box(0, 0, 800, 800), (100, 100)) == (1, 4)
    assert choose_scale(Box(0, 0, 799, 800), (100, 100)) == (1, 2)     # 799/4 < 2 x 100
    assert choose_scale(Box(0, 0, 1600, 3200), (100, 100)) == (1, 8)
    assert choose_scale(Box(0, 0, 1600, 500), (100, 100)) == (1, 2)    # the narrow side decides
    assert choose_scale(Box(0, 0, 399, 1800), (100, 100)) == (1, 1)
    assert choose_scale(Box(0, 0, 400, 400), (100, 100)) == (1, 2)
    assert choose_scale(Box(0, 0, 50, 50), (224, 224)) == (1, 1)        # enlarging
    assert choose_scale(Box(0, 0, 1600, 1600), (100, 100), [(1, 2), (3, 4)]) == (1, 2)
    assert choose_scale(Box(0, 0, 800, 800), (100, 100), []) == (1, 1)
    assert choose_scale(Box(0, 0, 400, 400), (100, 100), margin=1) == (1, 4)
    # an evaluation crop's box of floats
    assert choose_scale(Box(23.4, 85.0, 800.5, 800.5), (100, 100)) == (1, 4)


def test_crop_scaled_keeps_at_least_the_output_size():
    rng = random.Random(0)
    for _ in range(2000):
        src_h, src_w = rng.randint(16, 1200), rng.randint(16, 1200)
        bh, bw = rng.randint(1, src_h), rng.randint(1, src_w)
        box = Box(rng.randint(0, src_h - bh), rng.randint(0, src_w - bw), bh, bw)
        out_hw = (rng.randint(1, 300), rng.randint(1, 300))
        num, denom = choose_scale(box, out_hw)
        image = np.empty((-(-src_h * num // denom), -(-src_w * num // denom), 3), np.uint8)
        crop = crop_scaled(image, box, (num, denom))
        if (num, denom) != (1, 1):
            assert crop.shape[0] >= out_hw[0] and crop.shape[1] >= out_hw[1]
        else:
            assert crop.shape[:2] == (bh, bw)


@pytest.mark.turbojpeg
def test_turbojpeg_takes_the_dct_scaling_path(jpegs):
    import turbojpeg
    dec = get_decoder("turbojpeg")
    data = jpegs[0]
    h, w = pil_decode(data).shape[:2]
    box, out_hw = Box(8, 12, h - 20, w - 24), (40, 40)
    assert choose_scale(box, out_hw, dec.scales) == (1, 4)
    out = np.zeros(out_hw + (3,), np.uint8)
    dec.decode_into(data, box, True, out)

    quarter = turbojpeg.TurboJPEG().decode(data, turbojpeg.TJPF_RGB, (1, 4))
    expected = np.zeros_like(out)
    resize_scaled_into(quarter, box, (1, 4), expected, True)
    assert np.array_equal(out, expected)
    full_scale = np.zeros_like(out)
    resize_into(crop_scaled(dec.decode(data), box, (1, 1)), full_scale, True)
    assert not np.array_equal(out, full_scale)


# -- turbojpeg: fallbacks, warnings, options --------------------------------------------

@pytest.fixture
def turbo():
    return get_decoder("turbojpeg")


@pytest.mark.turbojpeg
def test_png_through_turbojpeg_falls_back_to_opencv(turbo, jpegs):
    png = cv2.imencode(".png", cv2.cvtColor(pil_decode(jpegs[1]), cv2.COLOR_RGB2BGR))[1].tobytes()
    assert not is_jpeg(png)
    assert np.array_equal(turbo.decode(png), pil_decode(jpegs[1]))   # lossless
    out, expected = np.zeros((50, 60, 3), np.uint8), np.zeros((50, 60, 3), np.uint8)
    turbo.decode_into(png, Box(3, 4, 200, 240), True, out)
    get_decoder("opencv").decode_into(png, Box(3, 4, 200, 240), True, expected)
    assert np.array_equal(out, expected)


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.turbojpeg
def test_cmyk_jpeg_falls_back_to_opencv(jpegs, strict):
    buf = io.BytesIO()
    Image.fromarray(pil_decode(jpegs[0])).convert("CMYK").save(buf, "JPEG", quality=90)
    cmyk = buf.getvalue()
    dec = get_decoder("turbojpeg", strict=strict)
    image = dec.decode(cmyk)
    assert np.array_equal(image, get_decoder("opencv").decode(cmyk))
    assert mean_abs_diff(image, pil_decode(jpegs[0])) < 8
    out = np.zeros((40, 40, 3), np.uint8)
    dec.decode_into(cmyk, Box(0, 0, 300, 300), False, out)
    assert out.any()


@pytest.mark.turbojpeg
def test_truncated_jpeg_fails_by_default_and_warns_when_lenient(turbo, jpegs):
    truncated = jpegs[0][: len(jpegs[0]) // 2]
    assert turbo.strict
    with pytest.raises(DecodeError, match="Premature end"):
        turbo.decode(truncated)
    with pytest.raises(DecodeError):
        turbo.decode_into(truncated, Box(0, 0, 300, 300), False, np.zeros((40, 40, 3), np.uint8))
    lenient = get_decoder("turbojpeg", strict=False)
    with pytest.warns(UserWarning, match="Premature end"):
        image = lenient.decode(truncated)
    assert image.shape == pil_decode(jpegs[0]).shape


@pytest.mark.parametrize("data", CORRUPT, ids=CORRUPT_IDS)
@pytest.mark.turbojpeg
def test_strict_turbojpeg_raises_decode_error_on_corrupt_bytes(turbo, data):
    with pytest.raises(DecodeError):
        get_decoder("turbojpeg", strict=True).decode(data)


@pytest.mark.turbojpeg
def test_strict_decodes_clean_jpegs_exactly_like_lenient(turbo, jpegs):
    strict, turbo = turbo, get_decoder("turbojpeg", strict=False)
    for data in jpegs:
        assert np.array_equal(strict.decode(data), turbo.decode(data))
        h, w = pil_decode(data).shape[:2]
        box = Box(10, 20, h - 30, w - 40)
        a, b = np.zeros((56, 56, 3), np.uint8), np.zeros((56, 56, 3), np.uint8)
        strict.decode_into(data, box, True, a)
        turbo.decode_into(data, box, True, b)
        assert np.array_equal(a, b)


@pytest.mark.turbojpeg
def test_fast_flags_stay_close_to_pil(jpegs):
    fast = get_decoder("turbojpeg", fast_dct=True, fast_upsample=True)
    assert fast.fast_dct and fast.fast_upsample
    for data in jpegs:
        assert mean_abs_diff(fast.decode(data), pil_decode(data)) < 3


# -- threads -------------------------------------------------------------------------

def test_many_threads_give_the_same_results_as_one(decoder, jpegs):
    tasks = []
    for data in jpegs:
        h, w = pil_decode(data).shape[:2]
        tasks += [(data, box, out_hw, flip) for box, out_hw in cases(h, w)[:3] for flip in (False, True)]

    def run(task):
        data, box, out_hw, flip = task
        out = np.empty(out_hw + (3,), np.uint8)
        decoder.decode_into(data, box, flip, out)
        return out

    expected = [run(task) for task in tasks]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(run, tasks * 3))
    for i, result in enumerate(results):
        assert np.array_equal(result, expected[i % len(tasks)])
    with ThreadPoolExecutor(max_workers=8) as pool:
        decoded = list(pool.map(decoder.decode, jpegs * 3))
    for i, image in enumerate(decoded):
        assert np.array_equal(image, decoder.decode(jpegs[i % len(jpegs)]))


# -- resize_into ---------------------------------------------------------------------

def test_resize_into_checks_out():
    crop = np.zeros((20, 20, 3), np.uint8)
    with pytest.raises(TypeError, match="uint8"):
        resize_into(crop, np.zeros((10, 10, 3), np.float32), False)
    with pytest.raises(TypeError, match="H x W x 3"):
        resize_into(crop, np.zeros((10, 10), np.uint8), False)


def test_resize_into_flips_in_place():
    crop = np.arange(6 * 8 * 3, dtype=np.uint8).reshape(6, 8, 3)
    out = np.zeros((6, 8, 3), np.uint8)
    resize_into(crop, out, True)
    assert np.array_equal(out, crop[:, ::-1])


# -- registry ------------------------------------------------------------------------

@pytest.mark.turbojpeg
def test_names_and_classes():
    assert decoder_names()[:5] == ("nvimgcodec", "turbojpeg", "simplejpeg", "opencv", "pil")
    assert set(available_decoders()) == set(decoder_names())
    for name in [*BACKENDS, "simplejpeg"]:
        assert get_decoder(name).name == name


def test_auto_prefers_nvimgcodec_strict_and_logs_once(caplog, monkeypatch):
    monkeypatch.setattr(selection, "_logged", set())
    with caplog.at_level(logging.INFO, logger="feedline.decoders.selection"):
        first = get_decoder("auto")
        assert get_decoder("auto").name == first.name == "nvimgcodec"
    assert first.strict
    [record] = [r for r in caplog.records if "'auto'" in r.getMessage()]
    assert "NvimgcodecDecoder(strict=True" in record.getMessage()   # the log says which one, and how


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="auto, nvimgcodec, turbojpeg, simplejpeg, opencv, pil"):
        get_decoder("libjpeg")


@pytest.mark.parametrize("engine", ["dali", "gpu"])
def test_engines_are_not_per_image_decoders(engine):
    with pytest.raises(ValueError, match=rf"an engine.*FeedLoader\(\.\.\., engine='{engine}'\)"):
        get_decoder(engine)


@pytest.mark.turbojpeg
def test_options_reach_the_backend():
    assert get_decoder("nvimgcodec", fast_dct=True).fast_dct
    assert not get_decoder("nvimgcodec", strict=False).strict
    assert get_decoder("turbojpeg", fast_dct=True).fast_dct
    with pytest.raises(TypeError):
        get_decoder("opencv", fast_dct=True)


def test_missing_library_reason():
    assert missing_library_reason("feedline_no_such_module_xyz", "PyFake", "pip install pyfake") == \
        "PyFake not installed: pip install pyfake"
    assert missing_library_reason("json", "JSON", "pip install json") is None
    for name, reason in available_decoders().items():
        assert reason is None or "install" in reason, (name, reason)


@pytest.mark.turbojpeg
def test_libturbojpeg_not_found_says_what_to_install(monkeypatch, caplog):
    import turbojpeg
    import ctypes.util
    from feedline.decoders.turbojpeg_decoder import LIB_INSTALL, TurbojpegDecoder
    # An environment without the library: nothing on the search paths.
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    monkeypatch.setattr(turbojpeg, "DEFAULT_LIB_PATHS", {})
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    monkeypatch.setattr(selection, "_logged", set())
    with pytest.raises(BackendUnavailable, match=f"^libturbojpeg not found: {re.escape(LIB_INSTALL)}$"):
        TurbojpegDecoder()
    assert available_decoders()["turbojpeg"] == f"libturbojpeg not found: {LIB_INSTALL}"
    with pytest.raises(BackendUnavailable, match="decoder 'turbojpeg' is unavailable: libturbojpeg not found"):
        get_decoder("turbojpeg")
    monkeypatch.setattr(selection, "AUTO_PREFERENCE", ("turbojpeg", "simplejpeg"))
    with caplog.at_level(logging.INFO, logger="feedline.decoders.selection"):
        assert get_decoder("auto").name == "simplejpeg"
    [record] = [r for r in caplog.records if "'auto'" in r.getMessage()]
    assert record.levelno == logging.WARNING and "libturbojpeg not found" in record.getMessage()
    with pytest.raises(BackendUnavailable, match="cannot be used"):
        TurbojpegDecoder(lib_path="/nonexistent/libturbojpeg.so.0")


def test_importing_the_registry_imports_no_backend():
    code = ("import sys, feedline, feedline.decoders; "
            "print([m for m in ('turbojpeg', 'cv2', 'PIL', 'nvidia.dali', 'nvidia.nvimgcodec', 'simplejpeg', "
            "'torch', 'numpy') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "[]"
