"""The stores the read-ahead tests share: small JPEGs in LMDB leaf pages, photos in its
overflow pages, a mix of both, HDF5 and two HDF5 shards; the plan those tests read."""
from __future__ import annotations

import pytest
from storefiles import Records, jpeg, make_records, write_hdf5, write_lmdb

from feedline import open_dataset
from feedline.planning.augment import AugmentSpec
from feedline.core.choices import Order
from feedline.planning.plan import EpochPlan


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
    with open_dataset(str(packed)) as store:
        images = [jpeg(16, 24, seed=i) if i % 8 == 3 else bytes(store.read(i)) for i in range(len(store))]
        return Records(images, list(store.labels), [tuple(s) for s in store.sizes],
                       [store.path(i) for i in range(len(store))], store.classes)


def _part(records, first, stop):
    return Records(records.images[first:stop], records.labels[first:stop], records.sizes[first:stop],
                   records.paths[first:stop], records.classes)


def file_bytes(path: str, offset: int, length: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(offset)
        return fh.read(length)


def plan(order=Order.QUASI_RANDOM, rank=0, world=1, block=4, window=3, batch=5, epoch=2) -> EpochPlan:
    return EpochPlan(AugmentSpec(size=8, train=False), seed=7, epoch=epoch, order=order, batch_size=batch,
                     drop_last=False, rank=rank, world_size=world, block=block, window=window)
