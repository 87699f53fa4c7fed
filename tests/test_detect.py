"""stores/detect.py: a packed file is recognized by its content, not its name; anything else
is a StoreError naming the file and saying what to do."""
from __future__ import annotations

import shutil

import pytest
from storefiles import make_records, write_hdf5, write_lmdb

from feedline.core.errors import StoreError
from feedline.stores.detect import looks_like_hdf5, looks_like_lmdb, open_file, read_head


def test_lmdb_and_hdf5_are_known_by_their_bytes_whatever_their_name(tmp_path):
    records = make_records(4, 2)
    lmdb_path, h5_path = write_lmdb(tmp_path / "a.lmdb", records), write_hdf5(tmp_path / "b.h5", records)
    renamed_lmdb, renamed_h5 = str(tmp_path / "data.h5"), str(tmp_path / "data.lmdb")
    shutil.copy(lmdb_path, renamed_lmdb)
    shutil.copy(h5_path, renamed_h5)
    assert looks_like_lmdb(read_head(renamed_lmdb)) and not looks_like_hdf5(read_head(renamed_lmdb))
    assert looks_like_hdf5(read_head(renamed_h5)) and not looks_like_lmdb(read_head(renamed_h5))
    for path in (renamed_lmdb, renamed_h5):
        with open_file(path) as store:
            assert len(store) == 4


def test_an_hdf5_user_block_is_skipped():
    assert looks_like_hdf5(b"\0" * 512 + b"\x89HDF\r\n\x1a\n") and not looks_like_hdf5(b"\0" * 100)


@pytest.mark.parametrize("content, message", [(b"", "empty file; not a feedline store"),
                                              (b"hello, world\n", "not a feedline store \\(neither LMDB nor HDF5\\)")])
def test_anything_else_is_refused_naming_the_file(tmp_path, content, message):
    path = tmp_path / "x.lmdb"
    path.write_bytes(content)
    with pytest.raises(StoreError, match=f"{path}: {message}"):
        open_file(str(path))
    with pytest.raises(StoreError, match="no such file or folder"):
        read_head(str(tmp_path / "missing.lmdb"))
