"""stores/advice.py: the byte ranges a read-ahead advises, merged where records are near."""
from __future__ import annotations


import numpy as np

import pytest


from storefiles import make_records, write_hdf5, write_lmdb

from feedline import open_dataset

from feedline.augment import AugmentSpec

from feedline.choices import Order

from feedline.plan import EpochPlan



from feedline.stores.advice import merged_ranges

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


def plan(order=Order.QUASI_RANDOM, rank=0, world=1, block=4, window=3, batch=5, epoch=2) -> EpochPlan:
    return EpochPlan(AugmentSpec(size=8, train=False), seed=7, epoch=epoch, order=order, batch_size=batch,
                     drop_last=False, rank=rank, world_size=world, block=block, window=window)


def test_merged_ranges_join_near_neighbours_only():
    offsets = np.array([5000, 0, 1000, 900_000, 1000])
    lengths = np.array([100, 1000, 500, 10, 200])   # 1000..1500 and 1000..1200 overlap
    assert merged_ranges("f", offsets, lengths) == [("f", 0, 5100), ("f", 900_000, 10)]
    assert merged_ranges("f", offsets, lengths, gap=0) == [("f", 0, 1500), ("f", 5000, 100), ("f", 900_000, 10)]
    assert merged_ranges("f", np.zeros(0, np.int64), np.zeros(0, np.int64)) == []
