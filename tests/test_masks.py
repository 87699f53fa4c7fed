"""Masks at pack time (converters/masks.py): packed losslessly beside each image with a
checksum, LMDB and HDF5, 8 and 16 bits, resumed; every refusal names the labels file's row
in one line and writes nothing; an EXIF-turned image's mask in the stored frame turns with it."""
from __future__ import annotations

import os

import numpy as np
import pytest
from masks_helpers import mask_folder, quadrant_image, quadrant_mask
from PIL import Image

from converters import PackOptions, pack
from converters.masks import turned
from feedline import open_dataset
from feedline.core.errors import PackError
from feedline.dataset.verify import verify


@pytest.mark.parametrize("out", ["m.lmdb", "m.h5"])
@pytest.mark.parametrize("scale", [1, 1000])
def test_every_mask_is_stored_as_it_was_given(tmp_path, out, scale):
    src, labels, masks = mask_folder(str(tmp_path), n=5, scale=scale)
    report = pack(src, str(tmp_path / out), labels_csv=labels, progress=False)
    assert report.packed == 5 and report.skipped == []
    with open_dataset(str(tmp_path / out)) as store:
        assert store.meta["format_version"] == 5
        assert store.fields["mask"] == {"codec": "deflate-rows", "bits": 8 if scale == 1 else 16,
                                        "values": [k * scale for k in (1, 2, 3, 4)]}
        for i in range(len(store)):
            assert np.array_equal(store.mask(i), masks[store.path(i)])
            assert store.targets(i)["mask"].dtype == (np.uint8 if scale == 1 else np.uint16)
        assert store.layout_problems() == []
    assert verify(str(tmp_path / out)).ok


def test_a_pack_without_masks_is_version_4_as_before(tmp_path):
    src, labels, _ = mask_folder(str(tmp_path), n=2)
    with open(labels) as fh:
        rows = [r.rsplit(",", 1)[0] for r in fh.read().splitlines()]
    (tmp_path / "plain.csv").write_text("\n".join(rows).replace("path,label", "path,labels") + "\n")
    pack(src, str(tmp_path / "p.lmdb"), labels_csv=str(tmp_path / "plain.csv"), progress=False)
    assert open_dataset(str(tmp_path / "p.lmdb")).meta["format_version"] == 4


def broken(tmp_path, what: str):
    src, labels, _ = mask_folder(str(tmp_path), n=4)
    target = os.path.join(src, "masks", "02.png")
    if what == "missing":
        os.remove(target)
    elif what == "size":
        Image.fromarray(np.zeros((10, 12), np.uint8)).save(target)
    elif what == "rgb":
        Image.fromarray(np.zeros((60, 80, 3), np.uint8)).save(target)
    elif what == "garbage":
        with open(target, "wb") as fh:
            fh.write(b"\x89PNG not really")
    return src, labels


@pytest.mark.parametrize("what, words", [("missing", "no such file"),
                                         ("size", r"12x10 \(WxH\), but its image is 64x64"),
                                         ("rgb", "a RGB image .* grayscale"),
                                         ("garbage", "not an image Pillow can read")])
@pytest.mark.parametrize("out", ["x.lmdb", "x.h5"])
def test_a_mask_that_does_not_fit_its_image_stops_the_pack_naming_its_row(tmp_path, what, words, out):
    src, labels = broken(tmp_path, what)
    with pytest.raises(PackError) as err:
        pack(src, str(tmp_path / out), labels_csv=labels, progress=False)
    text = str(err.value)
    assert "\n" not in text and "labels.csv: row 4 (img/02.png): mask masks/02.png" in text
    assert re_search(words, text) and "nothing written" in text
    assert not os.path.exists(tmp_path / out) and [p for p in os.listdir(tmp_path) if ".partial" in p] == []


def re_search(pattern: str, text: str) -> bool:
    import re
    return re.search(pattern, text) is not None


def test_max_side_is_refused_with_masks(tmp_path):
    src, labels, _ = mask_folder(str(tmp_path), n=2)
    with pytest.raises(PackError, match="its mask are in source pixels, and --max-side 32 would shrink"):
        pack(src, str(tmp_path / "m.lmdb"), labels_csv=labels, max_side=32, progress=False)


@pytest.mark.parametrize("orientation", [2, 3, 4, 5, 6, 7, 8])
def test_a_mask_turns_as_pil_turns_its_image(orientation):
    from PIL import ImageOps
    mask = np.arange(6 * 9, dtype=np.uint8).reshape(6, 9)
    im = Image.fromarray(mask)
    exif = im.getexif()
    exif[0x0112] = orientation
    im.info["exif"] = exif.tobytes()
    want = np.asarray(ImageOps.exif_transpose(im))
    assert np.array_equal(turned(mask, orientation), want)


def exif_folder(tmp_path, frame_of_mask: str):
    """One JPEG with EXIF orientation 6 (displayed turned a quarter clockwise) and its mask in the
    stored or displayed frame."""
    src = tmp_path / "src"
    os.makedirs(src / "masks")
    stored = quadrant_mask(40, 64, split=(10, 16))
    image = Image.fromarray(quadrant_image(stored))
    exif = image.getexif()
    exif[0x0112] = 6
    image.save(src / "a.jpg", exif=exif.tobytes(), quality=98)
    mask = stored if frame_of_mask == "stored" else np.rot90(stored, -1)
    Image.fromarray(np.ascontiguousarray(mask)).save(src / "masks" / "a.png")
    (tmp_path / "l.csv").write_text("path,mask\na.jpg,masks/a.png\n")
    return str(src), str(tmp_path / "l.csv"), np.rot90(stored, -1)


@pytest.mark.parametrize("frame", ["stored", "displayed"])
def test_an_exif_turned_images_mask_is_in_the_frame_labels_frame_says(tmp_path, frame):
    src, labels, displayed = exif_folder(tmp_path, frame)
    with pytest.raises(PackError, match="EXIF orientation 6, which pack applies to its pixels, and its mask would no longer"):
        pack(src, str(tmp_path / "a.lmdb"), labels_csv=labels, progress=False)
    pack(src, str(tmp_path / "a.lmdb"), PackOptions(labels_csv=labels, labels_frame=frame, progress=False))
    with open_dataset(str(tmp_path / "a.lmdb")) as store:
        assert store.size(0) == (64, 40) and np.array_equal(store.mask(0), displayed)
    other = "displayed" if frame == "stored" else "stored"
    with pytest.raises(PackError, match=r"mask masks/a.png: \d+x\d+ \(WxH\), but its image is"):
        pack(src, str(tmp_path / "b.lmdb"), PackOptions(labels_csv=labels, labels_frame=other, progress=False))


@pytest.mark.parametrize("out", ["r.lmdb", "r.h5"])
def test_an_interrupted_pack_with_masks_resumes_to_the_same_data_set(tmp_path, out, monkeypatch):
    src, labels, masks = mask_folder(str(tmp_path), n=6)
    from converters import packer
    calls = {"n": 0}
    real = packer.add_mask

    def dies_at_the_fifth(writer, entry, mask):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        real(writer, entry, mask)

    monkeypatch.setattr(packer, "add_mask", dies_at_the_fifth)
    with pytest.raises(KeyboardInterrupt):
        pack(src, str(tmp_path / out), labels_csv=labels, commit_every=2, progress=False)
    monkeypatch.setattr(packer, "add_mask", real)
    report = pack(src, str(tmp_path / out), labels_csv=labels, commit_every=2, resume=True, progress=False)
    assert report.resumed_from == 4 and report.packed == 6
    with open_dataset(str(tmp_path / out)) as store:
        assert all(np.array_equal(store.mask(i), masks[store.path(i)]) for i in range(6))
    assert verify(str(tmp_path / out)).ok
