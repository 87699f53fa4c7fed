"""The mask field: its labels-file column (CSV and JSON Lines), its spec, how shards join it,
what info says of it, and a folder read as it is (its PNG masks unpacked)."""
from __future__ import annotations

import os

import numpy as np
import pytest
from masks_helpers import check_on_pixels, mask_folder

from feedline import FeedLoader, OutputSpec, open_dataset
from feedline.dataset.describe import describe, format_info
from feedline.core.errors import FeedlineError
from feedline.fields import FieldsError, per_pixel
from feedline.fields.mask import Mask
from feedline.dataset.labels_file import read_labels_file
from feedline.dataset.scan import scan_folder


@pytest.mark.parametrize("jsonl", [False, True])
def test_a_labels_file_names_each_images_mask(tmp_path, jsonl):
    src, labels, masks = mask_folder(str(tmp_path), n=3, jsonl=jsonl)
    table = read_labels_file(labels)
    assert table.fields == {"label": {}, "mask": {"codec": "png"}}
    assert table.masks == ["masks/00.png", "masks/01.png", "masks/02.png"]
    scan = scan_folder(src, labels)
    assert scan.masks == table.masks and scan.problems == []   # the mask files are no unlisted images


def test_a_csv_header_may_call_the_column_segmentation(tmp_path):
    (tmp_path / "l.csv").write_text("image,segmentation\na.jpg,m/a.png\n")
    assert read_labels_file(str(tmp_path / "l.csv")).masks == ["m/a.png"]


@pytest.mark.parametrize("line, words", [('{"path": "a.jpg", "mask": 3}', "mask 3 is not a file name"),
                                         ('{"path": "a.jpg", "mask": "../m.png"}', "not a path inside the image folder"),
                                         ('{"path": "a.jpg", "mask": ""}', "is not a file name")])
def test_a_mask_value_that_names_no_file_inside_the_folder_is_refused_with_its_line(tmp_path, line, words):
    (tmp_path / "l.jsonl").write_text(line + "\n")
    with pytest.raises(FeedlineError, match=f"l.jsonl: line 1: .*{words}"):
        read_labels_file(str(tmp_path / "l.jsonl"))


@pytest.mark.parametrize("spec, words", [({"codec": "jpeg"}, "codec 'jpeg'"), ({"codec": "png", "bits": 12}, "bits 12"),
                                         ({"codec": "png", "values": [3, 1]}, "not distinct"),
                                         ({"codec": "png", "bits": 8, "values": [0, 256]}, "not distinct")])
def test_a_spec_that_does_not_read_as_masks_is_refused(spec, words):
    with pytest.raises(FieldsError, match=words):
        Mask(spec)


def test_shards_join_their_classes_and_a_model_learns_all_but_the_ignored():
    joined = Mask.joined_spec([{"codec": "deflate-rows", "bits": 8, "values": [0, 2, 255]},
                               {"codec": "deflate-rows", "bits": 16, "values": [0, 7]}])
    assert joined == {"codec": "deflate-rows", "bits": 16, "values": [0, 2, 7, 255]}
    assert Mask(joined).classes_beside(255) == 8 and Mask(joined).classes_beside(7) == 256
    assert per_pixel({"label": {}, "mask": joined}) == ["mask"] and per_pixel({"label": {}}) == []


def test_info_says_what_the_masks_hold(tmp_path):
    src, labels, _ = mask_folder(str(tmp_path), n=3)
    from converters import pack
    pack(src, str(tmp_path / "m.h5"), labels_csv=labels, progress=False)
    info = describe(str(tmp_path / "m.h5"))
    assert info.format_version == 5
    assert info.fields["mask"] == {"codec": "deflate-rows", "bits": 8, "values": [1, 2, 3, 4]}
    assert "mask (8-bit class indices: 1, 2, 3, 4)" in format_info(info)


def test_an_image_folder_read_as_it_is_delivers_its_png_masks(tmp_path):
    from PIL import Image
    src, labels, _ = mask_folder(str(tmp_path), n=4, image_ext=".jpg")
    store = open_dataset(src, labels_csv=labels)
    assert "mask (PNG files" in format_info(describe(store))
    for i in range(len(store)):
        assert np.array_equal(store.mask(i), np.asarray(Image.open(os.path.join(src, f"masks/{i:02d}.png"))))
    with FeedLoader(store, batch_size=2, size=40, train=True, engine="threads", num_workers=1,
                    device="cpu", decoder="pil", output=OutputSpec(mean=None), seed=0) as loader:
        assert sum(check_on_pixels(images, targets["mask"]) for images, targets in loader) > 0
