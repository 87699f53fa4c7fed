"""The image-folder store: its metadata and byte lengths, a file gone after opening, sizes read
once and an unreadable header."""
from __future__ import annotations

import logging
import os
import shutil

import numpy as np
from store_helpers import error_of, folder
from storefiles import jpeg

from feedline import open_dataset


def test_a_folder_store_describes_itself_and_measures_files_as_int64(folder):
    with open_dataset(folder) as store:
        assert store.meta == {"format": "folder", "count": 6, "classes": ["k0", "k1"]}
        lengths = store.byte_lengths()
        assert lengths.dtype == np.int64
        assert lengths.tolist() == [os.path.getsize(os.path.join(folder, store.path(i))) for i in range(6)]
        assert [store.size(i) for i in range(6)] == [(20 + int(store.path(i)[-5]), 30) for i in range(6)]


def test_a_folder_file_gone_after_opening_is_named_when_read_or_measured(folder, tmp_path):
    root = shutil.copytree(folder, tmp_path / "copy")
    with open_dataset(str(root)) as store:
        gone = os.path.join(store.filename, store.path(2))
        os.remove(gone)
        assert bytes(store.read(1)) == (root / store.path(1)).read_bytes()
        assert error_of(store.read, 2) == f"{gone}: cannot read (No such file or directory)"
        assert error_of(store.byte_lengths) == f"{gone}: cannot read (No such file or directory)"


def test_a_folder_size_is_read_once_and_an_unreadable_header_is_zero(folder, tmp_path, caplog):
    root = shutil.copytree(folder, tmp_path / "copy")
    caplog.set_level(logging.DEBUG, logger="feedline.stores.folder_store")
    with open_dataset(str(root)) as store:
        first, bad = os.path.join(store.filename, store.path(0)), os.path.join(store.filename, store.path(3))
        assert store.size(0) == (20, 30)
        with open(first, "wb") as fh:   # replaced after its first use: the size planned with stays
            fh.write(jpeg(50, 60, seed=9))
        with open(bad, "wb") as fh:
            fh.write(b"not an image at all")
        assert store.size(0) == (20, 30)
        assert store.size(3) == (0, 0)
        assert store.sizes[3].tolist() == [0, 0] and store.sizes[0].tolist() == [20, 30]
    messages = [r.getMessage() for r in caplog.records if r.name == "feedline.stores.folder_store"]
    assert len(messages) == 1 and messages[0].startswith(f"{bad}: cannot read the image header (")
    assert messages[0].endswith("); size (0, 0)") and "cannot identify image file" in messages[0]


def test_an_image_too_large_to_decode_is_a_one_line_reason_not_a_crop_error(tmp_path):
    from helpers_images import flat_gray_jpeg

    from feedline import FeedLoader
    from feedline.core.errors import FeedlineError
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "huge.jpg").write_bytes(flat_gray_jpeg(20000, 20000))
    (tmp_path / "a" / "small.jpg").write_bytes(flat_gray_jpeg(64, 48))
    with FeedLoader(str(tmp_path), batch_size=2, train=False, size=32, device="cpu", decoder="opencv") as loader:
        try:
            list(loader)
        except FeedlineError as exc:
            message = str(exc)
        else:
            raise AssertionError("a 20000 x 20000 image was read from a folder")
    assert "a/huge.jpg" in message and "too large to read from a folder" in message
    assert "--max-side" in message and "not inside" not in message and "\n" not in message
