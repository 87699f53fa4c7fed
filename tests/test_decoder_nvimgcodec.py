"""The nvimgcodec backend's own behaviour, and pack's header check without libturbojpeg."""
from __future__ import annotations

import io
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from feedline.decoders import get_decoder
from feedline.decoders.base import Box
from feedline.core.errors import DecodeError
from feedline.sample import make_photo_folder

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
import helpers_images  # noqa: E402


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory) -> list[bytes]:
    root = tmp_path_factory.mktemp("nv_photos")
    make_photo_folder(str(root), n=4, classes=1, seed=9, gray_fraction=0.0)
    return [p.read_bytes() for p in sorted(root.rglob("*.jpg"))]


def pil_rgb(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def test_region_decode_is_the_crop_of_the_full_decode(jpegs):
    """nvImageCodec's region decode (strict=False) gives exactly PIL's pixels in the box."""
    dec = get_decoder("nvimgcodec", strict=False)
    for data in jpegs:
        full = pil_rgb(data)
        h, w = full.shape[:2]
        for box in (Box(0, 0, h, w), Box(1, 3, h - 7, w - 5), Box(h - 1, w - 1, 1, 1)):
            out = np.zeros((box.height, box.width, 3), np.uint8)   # same size: no resampling
            dec.decode_into(data, box, False, out)
            assert np.array_equal(out, full[box.top:box.top + box.height, box.left:box.left + box.width])
        assert np.array_equal(dec.decode(data), full)


def test_exif_orientation_is_ignored(tmp_path):
    rotated = helpers_images.exif_rotated_jpeg(str(tmp_path / "r.jpg"))   # what a viewer shows
    data = (tmp_path / "r.jpg").read_bytes()
    for strict in (True, False):
        image = get_decoder("nvimgcodec", strict=strict).decode(data)
        assert image.shape[:2] == rotated.shape[:2][::-1]                # not turned by 90 degrees
        assert np.array_equal(image, pil_rgb(data))             # as stored, like PIL's plain decode


@pytest.mark.parametrize("strict", [True, False])
def test_other_formats_go_to_opencv(tmp_path, jpegs, strict):
    """PNG in a plain folder, and a 12-bit JPEG (which this OpenCV cannot read either)."""
    dec, cv = get_decoder("nvimgcodec", strict=strict), get_decoder("opencv")
    png = cv2.imencode(".png", pil_rgb(jpegs[0])[:, :, ::-1])[1].tobytes()
    assert np.array_equal(dec.decode(png), pil_rgb(jpegs[0]))
    a, b = np.zeros((8, 8, 3), np.uint8), np.zeros((8, 8, 3), np.uint8)
    dec.decode_into(png, Box(3, 4, 100, 90), True, a)
    cv.decode_into(png, Box(3, 4, 100, 90), True, b)
    assert np.array_equal(a, b)
    helpers_images.jpeg12_gray(str(tmp_path / "twelve.jpg"))
    twelve = (tmp_path / "twelve.jpg").read_bytes()
    with pytest.raises(DecodeError, match="OpenCV"):
        dec.decode(twelve)
    with pytest.raises(DecodeError, match="OpenCV"):
        dec.decode_into(twelve, Box(0, 0, 8, 8), False, a)


def test_a_decoder_per_thread_gives_the_same_results(jpegs):
    dec = get_decoder("nvimgcodec", strict=False)
    tasks = [(data, Box(k, 2 * k, 150, 120)) for data in jpegs for k in range(6)]

    def run(task):
        out = np.zeros((64, 64, 3), np.uint8)
        dec.decode_into(task[0], task[1], False, out)
        return out

    expected = [run(t) for t in tasks]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(run, tasks * 4))
    assert all(np.array_equal(r, expected[i % len(tasks)]) for i, r in enumerate(results))


def test_box_outside_the_image_is_a_decode_error(jpegs):
    dec = get_decoder("nvimgcodec", strict=False)
    h, w = pil_rgb(jpegs[0]).shape[:2]
    with pytest.raises(DecodeError, match="not inside"):
        dec.decode_into(jpegs[0], Box(h - 10, 0, 50, w), False, np.zeros((8, 8, 3), np.uint8))


def test_import_and_failures_print_nothing():
    """nvImageCodec's start-up errors (no nvJPEG2000/nvTIFF here) and its per-failure log
    lines never reach the user's terminal."""
    code = ("import numpy as np\n"
            "from feedline.decoders import get_decoder\n"
            "from feedline.core.errors import DecodeError\n"
            "d = get_decoder('nvimgcodec', strict=False)\n"
            "for bad in (b'\\xff\\xd8' + b'junk' * 9, b'\\xff\\xd8\\xff\\xdb'):\n"
            "    try:\n"
            "        d.decode(bad)\n"
            "    except DecodeError:\n"
            "        pass\n"
            "print('ok')\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert run.stdout.strip() == "ok" and run.stderr == ""


# -- pack's header check ------------------------------------------------------------------

def _jpeg(rgb: np.ndarray, **save) -> bytes:
    buf = io.BytesIO()
    im = Image.fromarray(rgb)
    im = im.convert(save.pop("mode")) if "mode" in save else im
    im.save(buf, "JPEG", quality=90, **save)
    return buf.getvalue()


def header_cases() -> dict[str, bytes]:
    rgb = helpers_images.pattern()
    return {"420": _jpeg(rgb), "422": _jpeg(rgb, subsampling=1), "444": _jpeg(rgb, subsampling=0),
            "progressive": _jpeg(rgb, progressive=True), "gray": _jpeg(rgb, mode="L"),
            "cmyk": _jpeg(rgb, mode="CMYK"), "rgb-coded": _jpeg(rgb, keep_rgb=True),
            "opencv": cv2.imencode(".jpg", rgb)[1].tobytes()}


def test_header_fallback_agrees_with_libturbojpeg():
    from converters.turbo_header import NvimgcodecHeader, TurboHeader
    system, fallback = TurboHeader(), NvimgcodecHeader()
    assert system._fallback is None   # CI has libturbojpeg0: this compares the two paths
    for name, data in header_cases().items():
        assert fallback(data) == system(data), name
    for bad in (b"hello", b"", b"\x89PNG\r\n\x1a\n" + bytes(40), b"\xff\xd8garbage"):
        with pytest.raises(OSError):
            fallback(bad)


def test_header_check_without_libturbojpeg_or_pyturbojpeg():
    """A process where ctypes finds no libturbojpeg and PyTurboJPEG does not import."""
    code = ("import ctypes, ctypes.util, sys\n"
            "ctypes.util.find_library = lambda name: None\n"
            "class NoTurbo(ctypes.PyDLL):\n"            # nor is it found by its usual name
            "    def __init__(self, name, *args, **kw):\n"
            "        if 'turbojpeg' in str(name):\n"
            "            raise OSError(f'{name}: cannot open shared object file')\n"
            "        super().__init__(name, *args, **kw)\n"
            "ctypes.PyDLL = NoTurbo\n"
            "sys.modules['turbojpeg'] = None\n"
            "import io, numpy as np\n"
            "from PIL import Image\n"
            "from converters.turbo_header import TurboHeader, NvimgcodecHeader\n"
            "h = TurboHeader()\n"
            "assert isinstance(h._fallback, NvimgcodecHeader)\n"
            "buf = io.BytesIO(); Image.fromarray(np.zeros((48, 64, 3), np.uint8)).save(buf, 'JPEG')\n"
            "print(h(buf.getvalue()))\n"
            "try:\n"
            "    h(b'hello')\n"
            "except OSError:\n"
            "    print('OSError')\n"
            "from feedline.decoders import available_decoders, get_decoder\n"
            "print(available_decoders()['turbojpeg'])\n"
            "print(get_decoder('auto').name)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.strip().splitlines()
    assert lines[:2] == ["(64, 48, 2, 1)", "OSError"]
    assert "PyTurboJPEG" in lines[2] and "pip install '.[turbojpeg]'" in lines[2]
    assert lines[3] == "nvimgcodec" and run.stderr == ""
