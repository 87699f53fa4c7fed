"""stores/lmdb_layout.py: where LMDB keeps each record and column in its B-tree pages, and
the files whose pages do not say (no hints, reads go on)."""
from __future__ import annotations



import pytest


from storefiles import make_records, write_hdf5, write_lmdb

from feedline import open_dataset

from feedline.augment import AugmentSpec

from feedline.choices import Order

from feedline.plan import EpochPlan

from feedline.sources.readahead import NoReadAhead, read_ahead



@pytest.fixture(scope="module")
def records():
    return make_records(n=40, classes=4)   # small JPEGs: LMDB keeps them inside its leaf pages

@pytest.fixture(scope="module")
def stores(records, packed_lmdb, tmp_path_factory):
    """Stores of every kind that can say where its records lie, by name."""
    folder = tmp_path_factory.mktemp("readahead")
    halves = [write_hdf5(folder / "a.h5", _part(records, 0, 25)), write_hdf5(folder / "b.h5", _part(records, 25, 40))]
    return {"lmdb-photos": str(packed_lmdb),   # photo JPEGs: each in LMDB's overflow pages
            "lmdb-mixed": str(write_lmdb(folder / "mixed.lmdb", mixed_records(packed_lmdb))),
            "hdf5": str(write_hdf5(folder / "small.h5", records)),
            "sharded": halves}

def mixed_records(packed):
    """The photos, every eighth one replaced by a JPEG small enough to live in a leaf page."""
    from storefiles import Records, jpeg
    with open_dataset(str(packed)) as store:
        images = [jpeg(16, 24, seed=i) if i % 8 == 3 else bytes(store.read(i)) for i in range(len(store))]
        return Records(images, list(store.labels), [tuple(s) for s in store.sizes],
                       [store.path(i) for i in range(len(store))], store.classes)

def _part(records, first, stop):
    from storefiles import Records
    return Records(records.images[first:stop], records.labels[first:stop], records.sizes[first:stop],
                   records.paths[first:stop], records.classes)

def file_bytes(path: str, offset: int, length: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(offset)
        return fh.read(length)

def plan(order=Order.QUASI_RANDOM, rank=0, world=1, block=4, window=3, batch=5, epoch=2) -> EpochPlan:
    return EpochPlan(AugmentSpec(size=8, train=False), seed=7, epoch=epoch, order=order, batch_size=batch,
                     drop_last=False, rank=rank, world_size=world, block=block, window=window)


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
    from feedline.format import LMDB_COLUMN_PREFIX
    from feedline.stores.lmdb_layout import key_places
    path = stores[kind]
    with open_dataset(path) as store:
        names = store.columns.names
        keys = [LMDB_COLUMN_PREFIX + name.encode() for name in names] + [b"feedline/col/none"]
        places = key_places(path, 4096, keys)
        assert sorted(places) == sorted(keys[:-1])
        for name, key in zip(names, keys):
            assert file_bytes(path, *places[key]) == store.columns.array(name).tobytes()
