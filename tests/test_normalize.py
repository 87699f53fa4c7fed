"""converters.normalize: each input kind becomes a record every decoder reads, or a skip."""
from __future__ import annotations

import io
import os

import cv2
import numpy as np
import pytest
from PIL import Image

import helpers_images as imgs
from converters import PackOptions, Skip
from converters.jpeg_header import parse_jpeg
from converters.normalize import Conversion, Record, check_file, convert

OPTIONS = PackOptions()


def normalize_file(root: str, rel: str, options: PackOptions) -> Record | Skip:
    """``root/rel`` as the packer stores it: the checked record, converted when it must be,
    or a Skip with the reason."""
    outcome = check_file(root, rel, options)
    return convert(outcome, options) if isinstance(outcome, Conversion) else outcome


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("good"))
    return folder, imgs.write_good(folder)


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("bad"))
    return folder, imgs.write_bad(folder)


def decode_all(data: bytes, gray: bool) -> dict[str, np.ndarray]:
    """The record decoded by libjpeg-turbo, OpenCV and Pillow, as RGB or gray."""
    from turbojpeg import TJPF_GRAY, TJPF_RGB, TurboJPEG
    tj = TurboJPEG().decode(data, pixel_format=TJPF_GRAY if gray else TJPF_RGB)
    cv = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_GRAYSCALE if gray else cv2.IMREAD_COLOR)
    pil = Image.open(io.BytesIO(data))
    assert pil.mode == ("L" if gray else "RGB")
    return {"turbojpeg": tj[..., 0] if gray else tj,
            "opencv": cv if gray else cv[..., ::-1],
            "pillow": np.asarray(pil)}


def mean_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def check_stored_form(record: Record) -> None:
    """Baseline/progressive Huffman, 8-bit, 1 or 3 components, no rotation: what nvJPEG and DALI read."""
    info = parse_jpeg(record.data)
    assert info.conversion_reason() is None
    assert (info.height, info.width) == (record.height, record.width)


@pytest.mark.parametrize("name", sorted(set(imgs.GOOD_BUILDERS) - {"twelve.jpg"}))
@pytest.mark.turbojpeg
def test_each_kind_decodes_to_expected_pixels(good, name):
    folder, expected = good
    record = normalize_file(folder, name, OPTIONS)
    assert isinstance(record, Record), record
    check_stored_form(record)
    want = expected[name]
    assert (record.height, record.width) == want.shape[:2]
    if name in imgs.PASS_THROUGH:
        assert record.converted is None
        assert record.data == open(os.path.join(folder, name), "rb").read()
    else:
        assert record.converted
    gray = want.ndim == 2
    for decoder, pixels in decode_all(record.data, gray).items():
        assert mean_abs_diff(pixels, want) < 4, (name, decoder)


def test_gray_stays_gray(good):
    folder, _ = good
    for name in ("gray.jpg", "gray16.png", "la.png"):
        assert parse_jpeg(normalize_file(folder, name, OPTIONS).data).components == 1, name


@pytest.mark.turbojpeg
def test_converted_colour_is_baseline_420(good):
    from turbojpeg import TJSAMP_420, TurboJPEG
    folder, _ = good
    record = normalize_file(folder, "rgba.png", OPTIONS)
    assert parse_jpeg(record.data).sof == 0xC0
    assert TurboJPEG().decode_header(record.data)[2] == TJSAMP_420


@pytest.mark.turbojpeg
def test_orientation_applied(good):
    folder, expected = good
    record = normalize_file(folder, "rotated.jpg", OPTIONS)
    assert (record.height, record.width) == (imgs.W, imgs.H)  # portrait now
    unrotated = imgs.pattern()
    pixels = decode_all(record.data, gray=False)["turbojpeg"]
    # Far from the unrotated pattern turned any other way, close to the clockwise turn.
    assert mean_abs_diff(pixels, expected["rotated.jpg"]) < 4
    assert mean_abs_diff(pixels, np.rot90(unrotated, 1)) > 40


def test_twelve_bit_is_converted_or_unsupported(good):
    folder, expected = good
    outcome = normalize_file(folder, "twelve.jpg", OPTIONS)
    if isinstance(outcome, Skip):  # no installed decoder reads 12-bit JPEG (libjpeg-turbo < 3 here)
        assert outcome.reason.value == "unsupported" and "12-bit" in outcome.detail
    else:
        check_stored_form(outcome)
        assert mean_abs_diff(decode_all(outcome.data, True)["pillow"], expected["twelve.jpg"]) < 4


@pytest.mark.turbojpeg
def test_max_side_shrinks_and_reencodes(good):
    folder, expected = good
    options = PackOptions(max_side=32, quality=90)
    for name in ("baseline.jpg", "gray.jpg", "rgb.png", "rotated.jpg"):
        record = normalize_file(folder, name, options)
        want = cv2.resize(expected[name], None, fx=0.5, fy=0.5, interpolation=cv2.INTER_AREA)
        assert (record.height, record.width) == want.shape[:2] and max(want.shape[:2]) == 32
        assert record.converted
        check_stored_form(record)
        assert mean_abs_diff(decode_all(record.data, want.ndim == 2)["opencv"], want) < 6, name


def test_max_side_leaves_smaller_jpegs_alone(good):
    folder, _ = good
    record = normalize_file(folder, "baseline.jpg", PackOptions(max_side=64))
    assert record.converted is None


def test_quality_applies_to_conversions(good):
    folder, _ = good
    low = normalize_file(folder, "rgb.png", PackOptions(quality=30))
    high = normalize_file(folder, "rgb.png", PackOptions(quality=98))
    assert len(low.data) < len(high.data)


def test_bad_inputs_are_skipped_with_their_reason(bad):
    folder, expected = bad
    for name, reason in expected.items():
        outcome = normalize_file(folder, name, OPTIONS)
        assert isinstance(outcome, Skip), name
        assert (outcome.path, outcome.reason.value) == (name, reason), outcome
        assert outcome.detail


def test_pixel_limit_applies_to_jpegs_too(good):
    folder, _ = good
    outcome = normalize_file(folder, "baseline.jpg", PackOptions(max_pixels=100))
    assert isinstance(outcome, Skip) and outcome.reason.value == "too-large"
    assert "64x48" in outcome.detail


def test_a_huge_jpeg_is_refused_saying_which_flag_shrinks_it(tmp_path):
    (tmp_path / "huge.jpg").write_bytes(imgs.flat_gray_jpeg(20000, 20000))
    outcome = normalize_file(str(tmp_path), "huge.jpg", PackOptions())
    assert isinstance(outcome, Skip) and outcome.reason.value == "too-large"
    assert "20000x20000 = 400000000 pixels > --max-pixels 100000000; pass --max-side" in outcome.detail
    tiny = normalize_file(str(tmp_path), "huge.jpg", PackOptions(max_side=2048, max_pixels=1_000_000))
    assert isinstance(tiny, Skip) and "even decoded at 1/8 scale" in tiny.detail   # 2500 x 2500 > 1e6


@pytest.mark.parametrize("max_pixels", [None, 400_000_000])
def test_max_side_shrinks_a_huge_jpeg_through_a_dct_scaled_decode(tmp_path, max_pixels):
    """--max-side decides: a 20000 x 20000 JPEG (over the default --max-pixels, and over
    Pillow's own limit) is decoded at 1/8 scale, never at full size, and stored at 2048."""
    (tmp_path / "huge.jpg").write_bytes(imgs.flat_gray_jpeg(20000, 20000))
    options = PackOptions(max_side=2048, **({} if max_pixels is None else {"max_pixels": max_pixels}))
    record = normalize_file(str(tmp_path), "huge.jpg", options)
    assert isinstance(record, Record) and (record.height, record.width) == (2048, 2048)
    pixels = np.asarray(Image.open(io.BytesIO(record.data)))
    assert pixels.shape == (2048, 2048) and abs(float(pixels.mean()) - 128) < 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_permission_denied_is_unreadable(tmp_path):
    path = tmp_path / "locked.jpg"
    imgs.baseline_jpeg(str(path))
    path.chmod(0)
    outcome = normalize_file(str(tmp_path), "locked.jpg", OPTIONS)
    assert isinstance(outcome, Skip) and outcome.reason.value == "unreadable"


def test_read_file_reads_everything(tmp_path):
    from converters.normalize import read_file
    for size in (0, 1, 4096, 3 << 20):
        (tmp_path / "f").write_bytes(os.urandom(size))
        assert read_file(str(tmp_path / "f")) == (tmp_path / "f").read_bytes()
    # Files whose size stat does not know (procfs) are read to their end too.
    assert read_file("/proc/self/status").startswith(b"Name:")
