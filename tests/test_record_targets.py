"""A store's masks (stores/record_targets.py): read, checked against their checksums on every
read, decoded, and judged by verify; from LMDB, HDF5 and shards alike; a store without masks
says so."""
from __future__ import annotations

import os
import re

import h5py
import numpy as np
import pytest
from masks_helpers import mask_folder, packed

from converters import pack
from feedline import open_dataset
from feedline.core.errors import ChecksumError, StoreError
from feedline.dataset.verify import verify


def damage_mask(path: str, record: int) -> None:
    """Flip a byte inside record ``record``'s stored mask, as a bad sector would."""
    with open_dataset(path) as store:
        if store.kind == "lmdb":
            import lmdb
            from feedline.dataset.format import MASK_SUFFIX, image_key
            store.close()
            env = lmdb.open(path, subdir=False, lock=False)
            with env.begin(write=True) as txn:
                key = image_key(record) + MASK_SUFFIX
                value = bytearray(txn.get(key))
                value[-2] ^= 0x55
                txn.put(key, bytes(value))
            env.close()
            return
    with h5py.File(path, "r") as fh:
        at = fh["masks"].id.get_offset() + int(fh["mask_offsets"][record + 1]) - 2
    with open(path, "r+b") as fh:
        fh.seek(at)
        byte = fh.read(1)[0]
        fh.seek(at)
        fh.write(bytes([byte ^ 0x55]))


@pytest.mark.parametrize("out", ["d.lmdb", "d.h5"])
def test_a_mask_changed_on_disk_fails_its_checksum_naming_the_record(tmp_path, out):
    path, masks = packed(str(tmp_path), out=out)
    damage_mask(path, 3)
    with open_dataset(path) as store:
        assert np.array_equal(store.mask(2), masks[store.path(2)])
        with pytest.raises(ChecksumError, match=r"record 3 \(img/03.png\): checksum mismatch \(stored [0-9a-f]{16}, "
                                                r"its mask's bytes read hash to"):
            store.read_mask_checked(3)
        store.read_mask(3)   # unchecked, the bytes are there
    result = verify(path)
    assert [p.index for p in result.problems] == [3]
    assert re.fullmatch(r"mask checksum mismatch: stored [0-9a-f]{16}, its mask's bytes read hash to [0-9a-f]{16}: "
                        r"the file changed on disk .*", result.problems[0].problem)
    assert [p.index for p in verify(path, mode="checksums").problems] == [3]


def test_verify_finds_a_mask_whose_pixels_disagree_with_the_metadata(tmp_path):
    path, _ = packed(str(tmp_path), out="v.h5")
    with h5py.File(path, "r+") as fh:   # the metadata's list of classes lost class 4
        import json
        meta = json.loads(fh.attrs["meta"])
        meta["fields"]["mask"]["values"] = [1, 2, 3]
        fh.attrs["meta"] = json.dumps(meta)
    problems = verify(path).problems
    assert problems and all("mask: holds class(es) [4] that the metadata's values do not list" == p.problem
                            for p in problems)


def test_shards_read_each_records_mask_from_its_own_file(tmp_path):
    src, labels, masks = mask_folder(str(tmp_path), n=6)
    pack(src, str(tmp_path / "s.h5"), labels_csv=labels, num_shards=3, progress=False)
    with open_dataset(str(tmp_path / "s.shards.json")) as store:
        assert all(np.array_equal(store.mask(i), masks[store.path(i)]) for i in range(6))
        assert store.fields["mask"]["values"] == [1, 2, 3, 4]
    damage_mask(str(tmp_path / "s-00002-of-00003.h5"), 0)
    with open_dataset(str(tmp_path / "s.shards.json")) as store, pytest.raises(ChecksumError, match="record 4"):
        store.read_mask_checked(4)


def test_a_store_without_masks_says_so(tmp_path):
    src, labels, _ = mask_folder(str(tmp_path), n=2)
    pack(src, str(tmp_path / "plain.lmdb"), progress=False)   # no labels file: classes from folders
    with open_dataset(str(tmp_path / "plain.lmdb")) as store, \
            pytest.raises(StoreError, match="plain.lmdb: no masks: its labels had no mask column"):
        store.read_mask_checked(0)
    assert os.path.exists(tmp_path / "plain.lmdb")
