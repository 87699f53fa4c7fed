"""What the Store base class gives every store: indexing and its errors, byte lengths and
ranges, checksums and the text of a mismatch (in a file and in a shard), the path and other
columns checked as a file opens. Real files written by tests/storefiles.py, damaged on purpose."""
from __future__ import annotations

import logging

import numpy as np
import pytest
from store_helpers import error_of, part, records
from storefiles import Records, write_hdf5, write_lmdb

from feedline import open_dataset
from feedline.core.errors import ChecksumError
from feedline.dataset.format import LMDB_COLUMN_PREFIX, checksum
from feedline.stores import Store


class ListStore(Store):
    """The least a store must define (``read``), over records held in memory: what the base
    class gives every store that does not override it."""

    kind = "list"

    def __init__(self, records: Records, filename: str = "memory"):
        self.filename, self.classes, self.meta = filename, records.classes, records.meta()
        self.columns = records.columns()
        self._images = records.images

    def read(self, index: int):
        return self._images[self._check(index)]


def test_the_base_store_measures_records_by_reading_them_and_names_no_ranges(records):
    store = ListStore(records)
    lengths = store.byte_lengths()
    assert lengths.tolist() == [len(b) for b in records.images] and lengths.dtype == np.int64
    assert store.byte_ranges(0, 12) == [] and store.byte_ranges(12, 12) == [] and store.will_need(0, 12) == 0
    assert error_of(store.byte_ranges, 3, 13, kind=IndexError) == "memory: records 3..12 are not within 0..11"
    assert error_of(store.will_need, 5, 4, kind=IndexError) == "memory: records 5..3 are not within 0..11"
    assert error_of(store.byte_ranges, -1, 2, kind=IndexError) == "memory: records -1..1 are not within 0..11"
    assert repr(store) == "<ListStore 'memory': 12 records, 3 classes>"
    assert store.files() == ["memory"] and store.layout_problems() == []


@pytest.mark.parametrize("kind", ["lmdb", "hdf5"])
def test_indices_out_of_range_or_not_integers_are_named_with_the_valid_range(tmp_path, records, kind):
    path = (write_lmdb if kind == "lmdb" else write_hdf5)(tmp_path / f"d.{kind}", records)
    with open_dataset(path) as store:
        assert bytes(store.read(-12)) == records.images[0] and store.path(-12) == records.paths[0]
        assert error_of(store.read, 12, kind=IndexError) == f"{path}: record 12 out of range (0..11)"
        assert error_of(store.label, -13, kind=IndexError) == f"{path}: record -13 out of range (0..11)"
        assert error_of(store.read, 1.0, kind=TypeError) == f"{path}: record index must be an integer, not float"
        assert error_of(store.byte_ranges, 0, 13, kind=IndexError) == f"{path}: records 0..12 are not within 0..11"
        assert repr(store) == f"<{type(store).__name__} '{path}': 12 records, 3 classes>"


def _wrong_sums(records: Records, index: int) -> tuple[np.ndarray, int, int]:
    sums = np.array([checksum(b) for b in records.images], dtype=np.uint64)
    actual = int(sums[index])
    sums[index] ^= np.uint64(0x5A5A)
    return sums, int(sums[index]), actual


def _mismatch_text(path: str, index: int, rel: str, stored: int, actual: int) -> str:
    return (f"{path}: record {index} ({rel}): checksum mismatch (stored {stored:016x}, the bytes read hash to "
            f"{actual:016x}): the file changed on disk after it was packed. Copy it again or pack the source "
            "folder again (feedline pack SRC OUT --overwrite); `feedline verify --checksums-only` lists every "
            "damaged record; to train past damaged records, pass on_error='substitute'.")


def test_a_checksum_mismatch_names_the_file_record_both_hashes_and_what_to_do(tmp_path, records):
    sums, stored, actual = _wrong_sums(records, 5)
    path = write_lmdb(tmp_path / "sums.lmdb", records, extra_keys={LMDB_COLUMN_PREFIX + b"checksums": sums.tobytes()})
    with open_dataset(path) as store:
        assert bytes(store.read_checked(4)) == records.images[4]
        with pytest.raises(ChecksumError) as info:
            store.read_checked(-7)
    err = info.value
    assert str(err) == _mismatch_text(path, 5, records.paths[5], stored, actual)
    assert (err.filename, err.index, err.path) == (path, 5, records.paths[5])


def test_a_checksum_mismatch_in_a_shard_names_the_set_the_shard_and_both_indices(tmp_path, records):
    first, meta = part(records, 0, 5)
    second, meta2 = part(records, 5, 12)
    sums, stored, actual = _wrong_sums(second, 2)
    files = [write_lmdb(tmp_path / "a.lmdb", first, meta),
             write_lmdb(tmp_path / "b.lmdb", second, meta2,
                        extra_keys={LMDB_COLUMN_PREFIX + b"checksums": sums.tobytes()})]
    with open_dataset(files) as store:
        assert store.filename == f"{files[0]} (+1 more shards)"
        with pytest.raises(ChecksumError) as info:
            store.read_checked(7)
        with pytest.raises(ChecksumError):   # the shard alone says the same: it keeps its own checksums
            store.stores[1].read_checked(2)
    err = info.value
    inner = _mismatch_text(files[1], 2, records.paths[7], stored, actual)
    assert str(err) == f"{files[0]} (+1 more shards): record 7, in shard {inner}"
    assert (err.filename, err.index, err.path) == (files[1], 7, records.paths[7])


def test_a_version_1_file_says_once_that_it_has_no_checksums(tmp_path, records, caplog):
    path = write_lmdb(tmp_path / "v1.lmdb", records, records.v1_meta())
    caplog.set_level(logging.WARNING, logger="feedline.stores.base")
    with open_dataset(path) as store:
        assert store.checksums is None and bytes(store.read_checked(3)) == records.images[3]
    with open_dataset(path):
        pass
    assert [r.getMessage() for r in caplog.records if r.name == "feedline.stores.base"] == [
        f"{path}: format version 1 has no checksums: damaged bytes cannot be told from good ones. "
        "Pack the image folder again to add them."]


@pytest.mark.parametrize("damage", ["first", "last", "order"])
def test_a_path_column_whose_offsets_are_out_of_order_or_off_the_end_is_refused(tmp_path, records, damage):
    offsets = records.columns().path_offsets.copy()
    if damage == "first":
        offsets[0] = 1
    elif damage == "last":
        offsets[-1] -= 1
    else:
        offsets[4] = offsets[3] - 1
    path = write_lmdb(tmp_path / "p.lmdb", records,
                      extra_keys={LMDB_COLUMN_PREFIX + b"path_offsets": offsets.tobytes()})
    assert error_of(open_dataset, path) == (f"{path}: the path column is damaged (offsets out of order or past "
                                            "the end). Pack it again.")


def test_path_offsets_that_stay_in_order_open_even_around_an_empty_path(tmp_path, records):
    offsets = records.columns().path_offsets.copy()
    offsets[4] = offsets[3]   # path 3 empty, path 4 spans both names: in order, so not judged here
    path = write_lmdb(tmp_path / "e.lmdb", records,
                      extra_keys={LMDB_COLUMN_PREFIX + b"path_offsets": offsets.tobytes()})
    with open_dataset(path) as store:
        assert store.path(3) == "" and store.path(4) == records.paths[3] + records.paths[4]


def test_a_column_that_is_not_whole_items_is_named_damaged(tmp_path, records):
    path = write_lmdb(tmp_path / "c.lmdb", records, extra_keys={LMDB_COLUMN_PREFIX + b"labels": b"\x01\x02\x03"})
    text = error_of(open_dataset, path)
    assert text.startswith(f"{path}: a column is damaged (") and text.endswith("). Pack it again.")
