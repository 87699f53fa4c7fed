"""Boxes and keypoints of images that pack turns by their EXIF orientation: the labels' frame
is a stated choice (--labels-frame stored|displayed), refused when missing, and in the stored
frame the labels turn with the pixels: checked in the packed store against hand-worked values
and against the packed pixels themselves (a red block under the box, a green and a blue dot
under the two keypoints)."""
from __future__ import annotations

import io
import json

import numpy as np
import pytest
from PIL import Image

import converters
from feedline import open_dataset
from feedline.core.errors import PackError
from feedline.dataset.verify import verify
from pack_helpers import committed

W, H = 400, 200   # the file's stored pixels
BOX = [40, 20, 120, 80]
POINTS = [(50, 30), (110, 70)]   # inside the box; point 0 green, point 1 blue

# Displayed (width, height), box and points for each orientation, worked by hand from the
# EXIF definitions: 2 mirrors left-right, 3 turns 180, 4 mirrors top-bottom, 5 transposes,
# 6 turns 90 clockwise, 7 transverses, 8 turns 90 counter-clockwise.
EXPECTED = {
    1: ((400, 200), [40, 20, 120, 80], [(50, 30), (110, 70)]),
    2: ((400, 200), [280, 20, 360, 80], [(350, 30), (290, 70)]),
    3: ((400, 200), [280, 120, 360, 180], [(350, 170), (290, 130)]),
    4: ((400, 200), [40, 120, 120, 180], [(50, 170), (110, 130)]),
    5: ((200, 400), [20, 40, 80, 120], [(30, 50), (70, 110)]),
    6: ((200, 400), [120, 40, 180, 120], [(170, 50), (130, 110)]),
    7: ((200, 400), [120, 280, 180, 360], [(170, 350), (130, 290)]),
    8: ((200, 400), [20, 280, 80, 360], [(30, 350), (70, 290)]),
}
GREY, RED, GREEN, BLUE = (128, 128, 128), (220, 30, 30), (30, 200, 30), (30, 30, 220)


def stored_pixels() -> np.ndarray:
    img = np.full((H, W, 3), GREY, np.uint8)
    x0, y0, x1, y1 = BOX
    img[y0:y1, x0:x1] = RED
    for (x, y), colour in zip(POINTS, (GREEN, BLUE)):
        img[y - 4:y + 4, x - 4:x + 4] = colour
    return img


def image_bytes(orientation: int, fmt: str = "JPEG") -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    Image.fromarray(stored_pixels()).save(buf, fmt, exif=exif.tobytes(), **({"quality": 95} if fmt == "JPEG" else {}))
    return buf.getvalue()


def folder(tmp_path, rows: dict[str, tuple[int, list, list]], fmt: str = "JPEG"):
    """Images named as ``rows``' keys with (orientation, boxes, keypoints), and their labels."""
    root = tmp_path / "images"
    root.mkdir()
    lines = []
    for name, (orientation, boxes, points) in rows.items():
        (root / name).write_bytes(image_bytes(orientation, fmt))
        lines.append(json.dumps({"path": name, "boxes": boxes, "keypoints": points}))
    labels = tmp_path / "labels.jsonl"
    labels.write_text("\n".join(lines) + "\n")
    return str(root), str(labels)


def stored_labels(orientation: int) -> tuple[int, list, list]:
    return orientation, [[*BOX, "thing"]], [[x, y, 2] for x, y in POINTS]


def colour_at(image: np.ndarray, x0, y0, x1, y1) -> np.ndarray:
    return image[int(y0) + 3:int(y1) - 3, int(x0) + 3:int(x1) - 3].reshape(-1, 3).mean(axis=0)


def test_stored_frame_labels_turn_with_the_pixels_for_all_eight_orientations(tmp_path):
    src, labels = folder(tmp_path, {f"o{o}.jpg": stored_labels(o) for o in EXPECTED})
    out = str(tmp_path / "out.lmdb")
    converters.pack(src, out, labels_csv=labels, labels_frame="stored", progress=False, commit_every=3)
    with open_dataset(out) as ds:
        assert ds.meta["pack_options"]["labels_frame"] == "stored"
        for i in range(len(ds)):
            o = int(ds.path(i)[1])
            (w, h), box, points = EXPECTED[o]
            assert ds.size(i) == (h, w), o
            targets = ds.targets(i)
            assert targets["boxes"] == [[*map(float, box), 0]], o
            assert targets["keypoints"] == [[float(x), float(y), 2.0] for x, y in points], o
            image = np.asarray(Image.open(io.BytesIO(bytes(ds.read(i)))).convert("RGB"))
            assert np.abs(colour_at(image, *box) - RED).max() < 20, o               # the box is on the block
            for (x, y), colour in zip(points, (GREEN, BLUE)):
                assert np.abs(image[int(y), int(x)].astype(int) - colour).max() < 40, (o, x, y)
            assert np.abs(image[2, 2].astype(int) - GREY).max() < 20                # and the corner is not
    assert verify(out).ok


def test_a_mirroring_orientation_trades_the_flip_pairs_names(tmp_path):
    """EXIF 2, 4, 5 and 7 mirror the image: with --flip-pairs 0:1 the points trade places, as a
    flip does; turns (3, 6, 8) keep them."""
    src, labels = folder(tmp_path, {f"o{o}.jpg": stored_labels(o) for o in (2, 3, 5, 6)})
    out = str(tmp_path / "out.lmdb")
    converters.pack(src, out, labels_csv=labels, labels_frame="stored", flip_pairs=((0, 1),), progress=False)
    with open_dataset(out) as ds:
        got = {int(ds.path(i)[1]): ds.targets(i)["keypoints"] for i in range(len(ds))}
    for o in (2, 3, 5, 6):
        points = EXPECTED[o][2][::-1] if o in (2, 5) else EXPECTED[o][2]
        assert got[o] == [[float(x), float(y), 2.0] for x, y in points], o


def test_displayed_frame_labels_are_kept_as_given(tmp_path):
    (w, h), box, points = EXPECTED[6]
    src, labels = folder(tmp_path, {"o6.jpg": (6, [[*box, "thing"]], [[x, y, 2] for x, y in points])})
    out = str(tmp_path / "out.h5")
    converters.pack(src, out, labels_csv=labels, labels_frame="displayed", progress=False)
    with open_dataset(out) as ds:
        assert ds.size(0) == (h, w)
        assert ds.targets(0)["boxes"] == [[*map(float, box), 0]]
        assert ds.targets(0)["keypoints"] == [[float(x), float(y), 2.0] for x, y in points]


def test_a_png_with_an_orientation_turns_its_labels_too(tmp_path):
    src, labels = folder(tmp_path, {"o8.png": stored_labels(8)}, fmt="PNG")
    out = str(tmp_path / "out.lmdb")
    converters.pack(src, out, labels_csv=labels, labels_frame="stored", progress=False)
    with open_dataset(out) as ds:
        assert ds.size(0) == (400, 200)
        assert ds.targets(0)["boxes"] == [[*map(float, EXPECTED[8][1]), 0]]


def test_an_annotated_turned_image_without_a_frame_is_refused_in_one_line(tmp_path):
    src, labels = folder(tmp_path, {"a.jpg": stored_labels(1), "b.jpg": stored_labels(6)})
    out = tmp_path / "out.lmdb"
    with pytest.raises(PackError) as err:
        converters.pack(src, str(out), labels_csv=labels, progress=False)
    text = str(err.value)
    assert "\n" not in text and "line 2 (b.jpg)" in text and "EXIF orientation 6" in text
    assert "--labels-frame stored" in text and "--labels-frame displayed" in text and "nothing written" in text
    assert not out.exists() and not list(tmp_path.glob("out.lmdb*"))


def test_a_turned_image_without_boxes_or_labelled_points_needs_no_frame(tmp_path):
    src, labels = folder(tmp_path, {"a.jpg": stored_labels(1), "b.jpg": (6, [], [[0, 0, 0], [0, 0, 0]])})
    out = str(tmp_path / "out.lmdb")
    converters.pack(src, out, labels_csv=labels, progress=False)
    with open_dataset(out) as ds:
        assert [ds.size(i) for i in range(2)] == [(200, 400), (400, 200)]
        assert "labels_frame" not in ds.meta["pack_options"]


@pytest.mark.parametrize("frame,box,words", [
    ("stored", [410, 10, 420, 20], "400x200 (WxH) image: correct it in the labels file (coordinates in the stored "
                                   "frame: the file's pixels before its EXIF orientation 6"),
    ("displayed", [250, 10, 260, 20], "200x400 (WxH) image: correct it in the labels file (coordinates in the "
                                      "displayed frame: the image after its EXIF orientation 6"),
])
def test_wholly_outside_names_the_frame_and_its_size(tmp_path, frame, box, words):
    """[410, 10, 420, 20] is outside the stored 400x200 image; [250, 10, 260, 20] is inside it but
    outside the displayed 200x400 one."""
    src, labels = folder(tmp_path, {"o6.jpg": (6, [[*box, "thing"]], [[0, 0, 0], [0, 0, 0]])})
    with pytest.raises(PackError, match="wholly outside its " + words.replace("(", r"\(").replace(")", r"\)")):
        converters.pack(src, str(tmp_path / "out.lmdb"), labels_csv=labels, labels_frame=frame, progress=False)


def test_a_turned_record_resumed_from_the_journal_still_turns_its_labels(tmp_path, monkeypatch):
    """The orientation applied is in each chunk's journal entry: a pack interrupted after the
    turned image's chunk turns its labels when resumed."""
    from converters import packer
    src, labels = folder(tmp_path, {f"o{o}.jpg": stored_labels(o) for o in (6, 1, 8)})
    out = str(tmp_path / "out.lmdb")
    real = packer.check_file

    def interrupted(root, rel, options):
        if rel == "o8.jpg":
            raise KeyboardInterrupt
        return real(root, rel, options)
    with monkeypatch.context() as m:
        m.setattr(packer, "check_file", interrupted)
        with pytest.raises(KeyboardInterrupt):
            converters.pack(src, out, labels_csv=labels, labels_frame="stored", progress=False, commit_every=1,
                            jobs=1)
    assert committed(out) == 2   # o1 and o6: the turned one is in the journal, not packed again
    converters.pack(src, out, labels_csv=labels, labels_frame="stored", progress=False, commit_every=1, resume=True)
    with open_dataset(out) as ds:
        for i in range(len(ds)):
            o = int(ds.path(i)[1])
            assert ds.targets(i)["boxes"] == [[*map(float, EXPECTED[o][1]), 0]], o
