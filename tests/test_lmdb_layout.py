"""stores/lmdb_layout.py: where LMDB keeps each record and column in its B-tree pages, and
the files whose pages do not say (no hints, reads go on)."""
from __future__ import annotations

import pytest

from layout_helpers import file_bytes, mixed_records, plan, records, stores  # noqa: F401 (fixtures)
from storefiles import write_lmdb

from feedline import open_dataset

from feedline.sources.readahead import NoReadAhead, read_ahead


def test_lmdb_records_kept_inside_leaf_pages_get_no_hints(records, tmp_path, monkeypatch):
    """Records of under half a page live in the B-tree's leaves: placing them would mean
    reading them (HDF5 keeps an offset table instead). So says a file of more than a MiB
    of leaf pages; here, the file is small, so that limit comes down to it."""
    from feedline.stores import lmdb_layout
    monkeypatch.setattr(lmdb_layout, "SMALL_INDEX", 0)
    path = write_lmdb(tmp_path / "small.lmdb", records)
    with open_dataset(path) as store:
        assert store.byte_ranges(0, len(store)) == [] and store.will_need(0, len(store)) == 0
        assert isinstance(read_ahead(store, plan(), 0), NoReadAhead)


def test_an_lmdb_file_whose_pages_do_not_place_every_record_gets_no_hints_and_reads_on(packed_lmdb, tmp_path):
    photos = mixed_records(packed_lmdb)
    path = write_lmdb(tmp_path / "gap.lmdb", photos, skip=(4,))   # record 4's key is missing
    with open_dataset(path) as store:
        assert store.byte_ranges(0, 10) == [] and store.will_need(0, 10) == 0
        assert bytes(store.read(5)) == photos.images[5]


@pytest.mark.parametrize("kind", ["lmdb-photos", "lmdb-mixed"])
def test_lmdb_columns_are_found_in_the_btree_where_lmdb_reads_them(stores, kind):
    """Opening advises the columns' pages before reading them: the places must be theirs."""
    from feedline.dataset.format import LMDB_COLUMN_PREFIX
    from feedline.stores.lmdb_layout import key_places
    path = stores[kind]
    with open_dataset(path) as store:
        names = store.columns.names
        keys = [LMDB_COLUMN_PREFIX + name.encode() for name in names] + [b"feedline/col/none"]
        places = key_places(path, 4096, keys)
        assert sorted(places) == sorted(keys[:-1])
        for name, key in zip(names, keys):
            assert file_bytes(path, *places[key]) == store.columns.array(name).tobytes()
