"""What the store tests share: small real record sets and an image folder, stores cut into
shards and their index written as feedline writes them, and the text of a store's error."""
from __future__ import annotations

import json
import os

import pytest
from storefiles import Records, jpeg, make_records, write_hdf5, write_lmdb

from feedline import StoreError


DAMAGED_TAIL = "the file is damaged. Pack it again."


@pytest.fixture(scope="module")
def records() -> Records:
    return make_records(n=12, classes=3)


@pytest.fixture(scope="module")
def photos() -> Records:
    """Records of some 10 KB: LMDB keeps each in overflow pages, so it can say where they lie."""
    sizes = [(96 + 8 * (i % 3), 128) for i in range(10)]
    return Records(images=[jpeg(h, w, seed=i) for i, (h, w) in enumerate(sizes)], labels=[i % 2 for i in range(10)],
                   sizes=sizes, paths=[f"c{i % 2}/p{i}.jpg" for i in range(10)], classes=["c0", "c1"])


def error_of(call, *args, kind=StoreError) -> str:
    with pytest.raises(kind) as info:
        call(*args)
    return str(info.value)


def part(records: Records, first: int, stop: int, **meta) -> tuple[Records, dict]:
    sub = Records(records.images[first:stop], records.labels[first:stop], records.sizes[first:stop],
                  records.paths[first:stop], records.classes, dict(records.pack_options))
    return sub, sub.meta(**meta)


def shards(folder, records: Records, cuts=(0, 5, 12), kind="lmdb", pack_id="p1", **meta) -> list[str]:
    """Shards of one pack (metadata "shard": index, of, pack_id), written as feedline writes them."""
    write = write_lmdb if kind == "lmdb" else write_hdf5
    n = len(cuts) - 1
    return [write(folder / f"s-{k:05d}-of-{n:05d}.{kind}",
                  *part(records, cuts[k], cuts[k + 1], shard={"index": k, "of": n, "pack_id": pack_id}, **meta))
            for k in range(n)]


def write_index(path, files: list[str], counts: list[int], classes, **fields) -> str:
    index = {"format": "feedline-shards", "version": 1, "format_version": 2, "kind": "lmdb",
             "count": sum(counts), "classes": classes, "checksums": True, "pack_id": "p1",
             "pack_options": {}, "source": "/data/src",
             "shards": [{"file": os.path.basename(f), "count": c} for f, c in zip(files, counts, strict=True)]}
    index.update(fields)
    with open(path, "w") as fh:
        json.dump(index, fh)
    return str(path)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    """Six small JPEGs in two class folders."""
    root = tmp_path_factory.mktemp("folder") / "imgs"
    for i in range(6):
        os.makedirs(root / f"k{i % 2}", exist_ok=True)
        (root / f"k{i % 2}" / f"i{i}.jpg").write_bytes(jpeg(20 + i, 30, seed=i))
    return str(root)
