"""An empty .jpg in an image folder is one bad record, said once by the loader, with no
numpy warning on the way (issue 23, item 6: "divide by zero encountered in divide")."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from feedline import FeedLoader
from feedline.planning.augment import center_crop
from feedline.sample import make_photo_folder


def test_center_crop_of_an_empty_record_is_an_empty_box_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        boxes = center_crop([0, 375], [0, 500], (224, 224))
    assert boxes[0].tolist() == [0, 0, 0, 0]
    np.testing.assert_array_equal(boxes[1], center_crop([375], [500], (224, 224))[0])


@pytest.mark.parametrize("train", [False, True])
def test_an_empty_jpg_in_a_folder_is_substituted_without_a_numpy_warning(tmp_path, train):
    make_photo_folder(str(tmp_path), n=6, classes=2, seed=0, sizes=[(64, 48)])
    (tmp_path / "class_000" / "empty.jpg").write_bytes(b"")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = FeedLoader(str(tmp_path), batch_size=7, size=32, device="cpu", on_error="substitute",
                            train=train)
        images = [x for x, _ in loader]
    assert sum(len(x) for x in images) == 7
    assert [r.path for r in loader.stats.bad_records] == ["class_000/empty.jpg"]
