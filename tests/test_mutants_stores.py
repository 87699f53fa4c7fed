"""Stores: the behaviours mutation testing (issue 15) found unpinned. Each test names what a
user sees: the whole text of an error (file, record, what to do), the values read back, the
ranges a read-ahead hint names, the sharing of one LMDB environment, the metadata of a set.
Real files only, written by tests/storefiles.py (the format's contract) and damaged on purpose."""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile

import h5py
import lmdb
import numpy as np
import pytest
from process_helpers import in_child
from storefiles import Records, jpeg, make_records, write_hdf5, write_lmdb

from feedline import StoreError, open_dataset
from feedline.errors import ChecksumError
from feedline.format import LMDB_COLUMN_PREFIX, checksum, image_key
from feedline.stores import ShardedStore, Store, lmdb_store
from feedline.stores.folder_store import FolderStore
from feedline.stores.lmdb_store import LmdbStore

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


# -- base.py: indexing, spans, checksums, the default byte lengths --------------------------------------

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


# -- __init__.py: open_dataset ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    """Six small JPEGs in two class folders."""
    root = tmp_path_factory.mktemp("folder") / "imgs"
    for i in range(6):
        os.makedirs(root / f"k{i % 2}", exist_ok=True)
        (root / f"k{i % 2}" / f"i{i}.jpg").write_bytes(jpeg(20 + i, 30, seed=i))
    return str(root)


def test_an_image_folder_opens_with_the_labels_a_csv_gives(folder, tmp_path):
    csv = tmp_path / "labels.csv"
    csv.write_text("path,label\n" + "".join(f"k{i % 2}/i{i}.jpg,{['emu', 'cat', 'dog'][i % 3]}\n" for i in range(6)))
    with open_dataset(folder, labels_csv=str(csv)) as store:
        assert store.classes == ["cat", "dog", "emu"]
        assert {store.path(i): store.label(i) for i in range(6)} == \
            {f"k{i % 2}/i{i}.jpg": ["cat", "dog", "emu"].index(["emu", "cat", "dog"][i % 3]) for i in range(6)}
    with FolderStore(folder, str(csv)) as store:
        assert store.classes == ["cat", "dog", "emu"]


def test_a_missing_path_is_named_and_one_with_a_shard_index_points_to_it(tmp_path, records):
    missing = str(tmp_path / "train.lmdb")
    assert error_of(open_dataset, missing) == f"{missing}: no such file or folder"
    write_index(tmp_path / "train.shards.json", [], [], records.classes)
    assert error_of(open_dataset, missing) == (f"{missing}: no such file, but {tmp_path}/train.shards.json names "
                                               "the shards of a sharded pack: open that")
    gone = str(tmp_path / "gone.shards.json")
    assert error_of(open_dataset, gone) == f"{gone}: no such file or folder"


def test_an_index_with_leading_white_space_is_still_an_index(tmp_path, records):
    files = shards(tmp_path, records)
    index = write_index(tmp_path / "s.shards.json", files, [5, 7], records.classes)
    with open(index) as fh:
        text = fh.read()
    with open(index, "w") as fh:
        fh.write("\n  \n" + text)
    with open_dataset(index) as store:
        assert [bytes(store.read(i)) for i in range(12)] == records.images


def test_an_lmdb_directory_is_explained(tmp_path):
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "data.mdb").write_bytes(b"")
    assert error_of(open_dataset, str(tmp_path / "db")) == (
        f"{tmp_path}/db: an LMDB directory; feedline stores are single-file LMDB. "
        "Pack the image folder with `feedline pack SRC OUT.lmdb`.")


# -- folder_store.py --------------------------------------------------------------------------------

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


# -- hdf5_store.py ----------------------------------------------------------------------------------

def rewrite(path, name: str, data=None, **kw) -> None:
    """Replace dataset ``name`` of an HDF5 file (another writer's choices, or damage)."""
    with h5py.File(path, "a") as fh:
        if data is None:
            data = fh[name][...]
        del fh[name]
        fh.create_dataset(name, data=data, **kw)


@pytest.mark.parametrize("form", ["str", "bytes", "array", "fixed-array", "opaque"])
def test_the_hdf5_metadata_reads_whichever_way_the_string_was_stored(tmp_path, records, form):
    path = write_hdf5(tmp_path / "m.h5", records)
    text = json.dumps(records.meta())
    value = {"str": text, "bytes": np.bytes_(text.encode()),
             "array": np.array([text], dtype=h5py.string_dtype()),
             "fixed-array": np.array([text.encode()], dtype=f"S{len(text)}"),
             "opaque": np.void(text.encode())}[form]
    with h5py.File(path, "a") as fh:
        fh.attrs["meta"] = value
    with open_dataset(path) as store:
        assert store.meta == records.meta() and bytes(store.read(11)) == records.images[11]


def test_hdf5_metadata_that_is_not_text_is_not_a_feedline_store(tmp_path, records):
    path = write_hdf5(tmp_path / "n.h5", records)
    with h5py.File(path, "a") as fh:
        fh.attrs["meta"] = 42
    assert error_of(open_dataset, path) == f'{path}: not a feedline store (no "format": "feedline")'


def test_hdf5_columns_stored_with_other_types_and_shapes_read_as_documented(tmp_path, records):
    path = write_hdf5(tmp_path / "t.h5", records)
    cols = records.columns()
    rewrite(path, "labels", cols.labels.astype(np.int16).reshape(-1, 1))
    rewrite(path, "sizes", cols.sizes.astype(np.int64))
    rewrite(path, "path_offsets", cols.path_offsets.astype(np.uint32).reshape(-1, 1))
    rewrite(path, "checksums", cols.checksums.reshape(-1, 1))
    rewrite(path, "offsets", np.concatenate([[0], np.cumsum([len(b) for b in records.images])]).astype(np.int32)
            .reshape(-1, 1))
    with open_dataset(path) as store:
        assert store.labels.dtype == np.int64 and store.labels.tolist() == records.labels
        assert store.sizes.dtype == np.int32 and store.sizes.tolist() == [list(s) for s in records.sizes]
        assert [store.path(i) for i in range(12)] == records.paths
        assert [bytes(store.read_checked(i)) for i in range(12)] == records.images
        assert store.byte_lengths().tolist() == [len(b) for b in records.images]
        assert store.byte_lengths().dtype == np.int64


@pytest.mark.parametrize("damage, message", [
    ("signed", "the images dataset is not a flat uint8 array; the file is damaged. Pack it again."),
    ("square", "the images dataset is not a flat uint8 array; the file is damaged. Pack it again."),
    ("group", "the images dataset is not a flat uint8 array; the file is damaged. Pack it again."),
    ("chunked", "the images dataset is chunked or compressed; feedline writes it contiguous. "
                "Pack it again with feedline."),
])
def test_an_hdf5_images_dataset_feedline_did_not_write_is_refused(tmp_path, records, damage, message):
    path = write_hdf5(tmp_path / "i.h5", records)
    with h5py.File(path, "a") as fh:
        blob = fh["images"][...]
        del fh["images"]
        if damage == "signed":
            fh.create_dataset("images", data=blob.view(np.int8))
        elif damage == "square":
            fh.create_dataset("images", data=np.zeros((2, len(blob) // 2), np.uint8))
        elif damage == "group":
            fh.create_group("images")
        else:
            fh.create_dataset("images", data=blob, chunks=(4096,))
    assert error_of(open_dataset, path) == f"{path}: {message}"


def test_an_hdf5_column_that_cannot_be_read_as_numbers_is_named(tmp_path, records):
    path = write_hdf5(tmp_path / "s.h5", records)
    rewrite(path, "labels", np.array([b"cat"] * 12))
    text = error_of(open_dataset, path)
    assert text.startswith(f"{path}: cannot read the HDF5 layout (") and text.endswith(f"); {DAMAGED_TAIL}")


@pytest.mark.parametrize("damage", ["longer", "negative", "short", "order"])
def test_hdf5_image_offsets_that_disagree_with_the_count_or_data_are_refused(tmp_path, records, damage):
    path = write_hdf5(tmp_path / "o.h5", records)
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in records.images])])
    if damage == "longer":
        offsets = np.concatenate([[0], offsets])
    elif damage == "negative":
        offsets[0] = -1
    elif damage == "short":
        offsets[-1] -= 1
    else:
        offsets[5] = offsets[4] - 1
    rewrite(path, "offsets", offsets)
    assert error_of(open_dataset, path) == (f"{path}: image offsets disagree with the record count or the data "
                                            f"size; {DAMAGED_TAIL}")


def test_empty_hdf5_records_read_as_empty_uint8(tmp_path, records):
    images = list(records.images)
    images[3] = b""
    one = Records(images, records.labels, records.sizes, records.paths, records.classes)
    none = Records([b""] * 2, [0, 1], [(0, 0)] * 2, ["a/x.jpg", "b/y.jpg"], ["a", "b"])
    with open_dataset(write_hdf5(tmp_path / "one.h5", one)) as store:
        assert bytes(store.read(3)) == b"" and bytes(store.read(4)) == images[4]
    with open_dataset(write_hdf5(tmp_path / "none.h5", none)) as store:
        for i in range(2):
            data = store.read(i)
            assert isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.shape == (0,)


def test_hdf5_records_are_read_only_views_of_the_file(tmp_path, records):
    path = write_hdf5(tmp_path / "r.h5", records)
    with open_dataset(path) as store:
        data = store.read(2)
        assert data.dtype == np.uint8 and not data.flags.writeable
        with pytest.raises(ValueError):
            data[0] = 0
    assert open_dataset(path).read(2).tobytes() == records.images[2]


def _images_last(path, records: Records) -> str:
    """An HDF5 store whose image bytes are the last bytes of the file."""
    cols = records.columns()
    with h5py.File(path, "w") as fh:
        fh.attrs["meta"] = json.dumps(records.meta())
        for name in cols.names:
            fh.create_dataset(name, data=cols.array(name))
        fh.create_dataset("offsets", data=np.concatenate([[0], np.cumsum([len(b) for b in records.images])]))
        fh.create_dataset("images", data=np.frombuffer(b"".join(records.images), np.uint8))
    return str(path)


def test_hdf5_image_data_that_ends_the_file_opens_and_data_past_the_end_is_refused(tmp_path, records):
    path = _images_last(tmp_path / "last.h5", records)
    with h5py.File(path, "r") as fh:
        assert fh["images"].id.get_offset() + fh["images"].shape[0] == os.path.getsize(path)
    with open_dataset(path) as store:
        assert bytes(store.read(11)) == records.images[11]
    # Cut short, with the superblock's end-of-file address cut to match (else HDF5 refuses
    # the file as truncated): the image data now runs past the end, which HDF5 finds too.
    size = os.path.getsize(path) - len(records.images[11]) // 2
    os.truncate(path, size)
    with open(path, "r+b") as fh:
        fh.seek(40)
        fh.write(size.to_bytes(8, "little"))
    assert error_of(open_dataset, path) == (f"{path}: cannot read the HDF5 layout (Unable to synchronously open "
                                            "object (invalid dataset size, likely file corruption)); "
                                            f"{DAMAGED_TAIL}")


@pytest.mark.parametrize("name", ["images", "offsets", "path_bytes", "checksums"])
def test_a_missing_hdf5_dataset_is_named(tmp_path, records, name):
    path = write_hdf5(tmp_path / "x.h5", records)
    with h5py.File(path, "a") as fh:
        del fh[name]
    assert error_of(open_dataset, path) == f"{path}: dataset '{name}' is missing; {DAMAGED_TAIL}"


def test_hdf5_image_data_never_written_is_refused(tmp_path, records):
    path = write_hdf5(tmp_path / "lazy.h5", records)
    total = sum(len(b) for b in records.images)
    with h5py.File(path, "a") as fh:
        del fh["images"]
        fh.create_dataset("images", shape=(total,), dtype=np.uint8)   # space never allocated
    assert error_of(open_dataset, path) == (f"{path}: the file is truncated (image data runs past its end). "
                                            "Pack it again.")


# -- lmdb_store.py ----------------------------------------------------------------------------------

def page_size(path: str) -> int:
    env = lmdb.open(path, subdir=False, readonly=True, lock=False)
    try:
        return env.stat()["psize"]
    finally:
        env.close()


def test_an_lmdb_store_without_metadata_says_so_and_an_unfinished_pack_says_resume(tmp_path, records):
    plain = write_lmdb(tmp_path / "plain.lmdb", records, with_meta=False)
    partial = write_lmdb(tmp_path / "out.lmdb.partial", records, with_meta=False)
    assert error_of(open_dataset, plain) == f"{plain}: an LMDB file, but not a feedline store (no feedline/meta key)"
    assert error_of(open_dataset, partial) == (f"{partial}: an LMDB file, but not a feedline store (no feedline/meta "
                                               "key) (an unfinished pack: rerun `feedline pack ... --resume`)")


def test_lmdb_reads_are_zero_copy_and_lengths_int64(tmp_path, records):
    with open_dataset(write_lmdb(tmp_path / "z.lmdb", records)) as store:
        data = store.read(5)
        assert isinstance(data, memoryview) and bytes(data) == records.images[5]
        lengths = store.byte_lengths()
        assert lengths.dtype == np.int64 and lengths.tolist() == [len(b) for b in records.images]
    gap = write_lmdb(tmp_path / "gap.lmdb", records, skip=(4,))
    with open_dataset(gap) as store:
        assert error_of(store.read, 4) == f"{gap}: record 4 (class_1/img_004.jpg) is missing; {DAMAGED_TAIL}"
        assert bytes(store.read(5)) == records.images[5]


def test_a_truncated_lmdb_file_says_how_long_it_is_and_must_be(tmp_path, photos):
    path = write_lmdb(tmp_path / "t.lmdb", photos)
    env = lmdb.open(path, subdir=False, readonly=True, lock=False)
    needed = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    cut = needed - 3 * env.stat()["psize"]
    env.close()
    os.truncate(path, cut)
    assert error_of(open_dataset, path) == (f"{path}: the file is truncated ({cut} bytes, LMDB needs {needed}). "
                                            "Pack it again.")


def test_an_lmdb_file_gone_or_cut_after_close_is_named_at_each_read(tmp_path, records):
    path = write_lmdb(tmp_path / "g.lmdb", records)
    store = LmdbStore(path)
    assert bytes(store.read(0)) == records.images[0]
    store.close()
    cut = 3 * page_size(path)
    os.truncate(path, cut)
    for _ in range(2):   # a failed reopen leaves the store able to try again
        assert error_of(store.read, 0).startswith(f"{path}: the file is truncated ({cut} bytes, LMDB needs ")
    os.remove(path)
    assert error_of(store.read, 0) == f"{path}: cannot open (No such file or directory)"


def test_stores_on_one_file_share_one_environment_released_by_the_last_close(tmp_path, photos):
    path = write_lmdb(tmp_path / "s.lmdb", photos)

    def work() -> bytes:
        first, second = LmdbStore(path), LmdbStore(path)
        view = second.read(3)
        first.close()   # second's buffers stay valid: the environment is still in use
        ok = bytes(view) == photos.images[3] and bytes(second.read(4)) == photos.images[4]
        second.close()
        lmdb.open(path, subdir=False, readonly=True, lock=False).close()   # released: py-lmdb opens it again
        return b"ok" if ok else b"wrong bytes"

    assert in_child(work) == (0, b"ok")
    store = LmdbStore(path)
    with pytest.raises(lmdb.Error, match="already open"):
        lmdb.open(path, subdir=False, readonly=True, lock=False)
    store.close()
    lmdb.open(path, subdir=False, readonly=True, lock=False).close()
    st = os.stat(path)
    assert (st.st_dev, st.st_ino) not in lmdb_store._shared   # nothing kept for a file no store reads


def test_a_forked_child_reads_through_its_own_environment(tmp_path, records):
    path = write_lmdb(tmp_path / "f.lmdb", records)
    with LmdbStore(path) as store:
        assert bytes(store.read(1)) == records.images[1]
        parent_env = store._environment()

        def work() -> bytes:
            ok = bytes(store.read(2)) == records.images[2]
            env = store._environment()
            return b"ok" if ok and env is not parent_env and store._env_share.pid == os.getpid() else b"inherited"

        assert in_child(work) == (0, b"ok")
        assert bytes(store.read(3)) == records.images[3]


def test_the_fork_hook_gives_a_child_a_fresh_lock_and_its_own_process_id(tmp_path, records):
    """What ``os.fork`` runs in the child, run here (in a process that did not fork, it must
    change nothing a store sees): a lock no thread holds, and the process id that a store
    compares with its environment's to know it was inherited."""
    with LmdbStore(write_lmdb(tmp_path / "k.lmdb", records)) as store:
        env, lock = store._environment(), lmdb_store._lock
        lmdb_store._after_fork_in_child()
        assert lmdb_store._lock is not lock and lmdb_store._lock.acquire(blocking=False)
        lmdb_store._lock.release()
        assert lmdb_store._pid == os.getpid() and store._environment() is env
        assert bytes(store.read(1)) == records.images[1]


def test_a_forked_child_that_cannot_reopen_the_file_says_so_at_each_read(tmp_path, records):
    path = write_lmdb(tmp_path / "c.lmdb", records)
    cut = 3 * page_size(path)
    store = LmdbStore(path)
    assert bytes(store.read(0)) == records.images[0]
    os.truncate(path, cut)   # the parent reads no more

    def work() -> bytes:
        messages = []
        for _ in range(2):
            try:
                store.read(1)
            except StoreError as exc:
                messages.append(str(exc))
        return "\n".join(messages).encode()

    code, out = in_child(work)
    store.close()
    assert code == 0
    assert [m.split(" (")[0] for m in out.decode().split("\n")] == [f"{path}: the file is truncated"] * 2


def test_a_read_only_lmdb_file_of_another_user_opens_and_reads(records):
    """Opened read-only: a data set shared read-only (here: root's, read by nobody) reads."""
    root = os.geteuid() == 0
    folder = tempfile.mkdtemp(dir="/tmp" if root else None)
    try:
        os.chmod(folder, 0o755)
        path = write_lmdb(os.path.join(folder, "ro.lmdb"), records)
        os.chmod(path, 0o444)
        with open_dataset(path) as store:   # here too (root may write it: this proves less)
            assert bytes(store.read(0)) == records.images[0]

        def work() -> bytes:
            if root:
                os.setgid(65534)
                os.setuid(65534)   # nobody: may read the file, not write it
            with open_dataset(path) as store:
                return b"ok" if [bytes(store.read(i)) for i in range(12)] == records.images else b"wrong bytes"

        assert in_child(work) == (0, b"ok")
    finally:
        shutil.rmtree(folder)


def _leaf_node_data(path: str, key: bytes) -> int:
    """The file offset of the data of ``key``'s leaf node (for a large value: its first page number)."""
    with open(path, "rb") as fh:
        raw = fh.read()
    at = raw.index(key)
    assert raw.count(key) == 1 and int.from_bytes(raw[at - 2:at], "little") == len(key)
    return at + len(key)


def test_an_lmdb_record_whose_pages_are_lost_is_named_by_read_and_by_byte_lengths(tmp_path, photos):
    path = write_lmdb(tmp_path / "lost.lmdb", photos)
    at = _leaf_node_data(path, image_key(6))
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write((1 << 40).to_bytes(8, "little"))   # its overflow pages: far past the end
    with open_dataset(path) as store:
        assert bytes(store.read(5)) == photos.images[5]
        text = error_of(store.read, 6)
        assert text.startswith(f"{path}: record 6 (c0/p6.jpg) cannot be read (") and text.endswith(f"); {DAMAGED_TAIL}")
        assert bytes(store.read(7)) == photos.images[7]   # a new transaction: later reads go on
        text = error_of(store.byte_lengths)
        assert text.startswith(f"{path}: cannot read the record index (") and text.endswith("); the file is damaged")


def test_an_lmdb_file_whose_root_page_is_lost_is_named_damaged(tmp_path, records):
    path = write_lmdb(tmp_path / "root.lmdb", records)
    psize = page_size(path)
    with open(path, "r+b") as fh:
        for meta_page in (0, psize):   # both meta pages: the main database's root page number
            fh.seek(meta_page + 128)
            fh.write((1 << 20).to_bytes(8, "little"))
    text = error_of(open_dataset, path)
    assert text.startswith(f"{path}: the LMDB file is damaged (") and text.endswith("). Pack it again.")


def test_lmdb_columns_not_found_in_the_btree_are_read_without_advice(tmp_path, records, caplog, monkeypatch):
    from feedline.stores.lmdb_layout import LayoutError

    def unreadable(*args):
        raise LayoutError("a page header is damaged")

    monkeypatch.setattr(lmdb_store, "key_places", unreadable)
    caplog.set_level(logging.DEBUG, logger="feedline.stores.lmdb_store")
    path = write_lmdb(tmp_path / "a.lmdb", records)
    with open_dataset(path) as store:
        assert store.labels.tolist() == records.labels and bytes(store.read(4)) == records.images[4]
    assert [r.getMessage() for r in caplog.records if r.name == "feedline.stores.lmdb_store"] == [
        f"{path}: columns not advised (a page header is damaged)"]


def test_lmdb_read_ahead_names_the_records_ranges_or_says_why_it_cannot(tmp_path, photos, caplog):
    caplog.set_level(logging.INFO, logger="feedline.stores.lmdb_store")
    path = write_lmdb(tmp_path / "h.lmdb", photos)
    with open_dataset(path) as store:
        ranges = store.byte_ranges(2, 5)
        assert [p for p, _, _ in ranges] == [path] and store.byte_ranges(4, 4) == []
        with open(path, "rb") as fh:
            raw = fh.read()
        for i in (2, 3, 4):
            assert any(photos.images[i] in raw[offset:offset + length] for _, offset, length in ranges)
        assert error_of(store.byte_ranges, 9, 11, kind=IndexError) == f"{path}: records 9..10 are not within 0..9"
    gap = write_lmdb(tmp_path / "gap.lmdb", photos, skip=(4,))
    with open_dataset(gap) as store:
        assert store.byte_ranges(0, 3) == [] and bytes(store.read(3)) == photos.images[3]
    assert [r.getMessage() for r in caplog.records if r.name == "feedline.stores.lmdb_store"] == [
        f"{gap}: no read-ahead hints (1 records have no leaf node)"]


@pytest.mark.parametrize("wrong", [0, 9])
def test_lmdb_places_that_miss_the_first_or_last_record_give_no_hints(tmp_path, photos, caplog, monkeypatch, wrong):
    """The places are checked against two real reads, the first record and the last: a page walk
    that went astray (here: made to) gives no hints rather than wrong ones."""
    from feedline.stores import lmdb_layout
    real = lmdb_layout.value_places

    def astray(*args):
        offsets, lengths = real(*args)
        offsets = offsets.copy()
        offsets[wrong] += 1
        return offsets, lengths

    monkeypatch.setattr(lmdb_store, "value_places", astray)
    caplog.set_level(logging.INFO, logger="feedline.stores.lmdb_store")
    path = write_lmdb(tmp_path / "w.lmdb", photos)
    with open_dataset(path) as store:
        assert store.byte_ranges(0, 10) == [] and store.will_need(0, 10) == 0
    assert [r.getMessage() for r in caplog.records if r.name == "feedline.stores.lmdb_store"] == [
        f"{path}: no read-ahead hints (record {wrong} is not where its leaf node says)"]


def test_lmdb_layout_problems_count_every_extra_image_key_and_journal_key(tmp_path, records):
    extra = {b"img/0000000012": b"x", b"img/0000000099": b"y", b"img/12x": b"z",
             b"feedline/journal/00000000": b"{}", b"feedline/journal/00000001": b"{}", b"zz/other": b"w"}
    with open_dataset(write_lmdb(tmp_path / "x.lmdb", records, extra_keys=extra)) as store:
        assert store.layout_problems() == [
            "3 image key(s) beyond the 12 records the metadata counts (15 image keys stored)",
            "2 pack journal key(s) left: the pack did not finish"]
    with open_dataset(write_lmdb(tmp_path / "y.lmdb", records, extra_keys={b"zz/other": b"w"})) as store:
        assert store.layout_problems() == []


# -- sharded_store.py -------------------------------------------------------------------------------

def test_a_sharded_set_describes_itself_from_its_index_and_first_shard(tmp_path, records):
    first, meta0 = part(records, 0, 5, created="2024-01-01T00:00:00Z", feedline_version="0.1.0",
                        pack_options={"quality": 90, "max_side": None, "decode_check": True},
                        shard={"index": 0, "of": 2, "pack_id": "p1"})
    second, meta1 = part(records, 5, 12, created="2024-01-02T00:00:00Z", feedline_version="0.1.1",
                         pack_options={"quality": 90, "decode_check": False},
                         shard={"index": 1, "of": 2, "pack_id": "p1"})
    files = [write_lmdb(tmp_path / "o-00000-of-00002.lmdb", first, meta0),
             write_lmdb(tmp_path / "o-00001-of-00002.lmdb", second, meta1)]
    index = write_index(tmp_path / "o.shards.json", files, [5, 7], records.classes)
    expected = {"format": "feedline", "format_version": 2, "count": 12, "classes": records.classes,
                "pack_options": {"quality": 90}, "source": "/data/src", "created": "2024-01-01T00:00:00Z",
                "feedline_version": "0.1.0", "shards": ["o-00000-of-00002.lmdb", "o-00001-of-00002.lmdb"]}
    for source in (index, files[::-1]):
        with open_dataset(source) as store:
            assert store.meta == expected and store.kind == "lmdb" and store.files() == files
            assert [store.path(i) for i in range(12)] == records.paths
            assert [[s.path(i) for i in range(len(s))] for s in store.stores] == [records.paths[:5], records.paths[5:]]
            assert store.stores[1].checksums.tolist() == [checksum(b) for b in records.images[5:]]
    with open_dataset(index) as store:
        assert store.filename == index
        assert repr(store) == f"<ShardedStore '{index}': 12 records in 2 lmdb shards, 3 classes>"


def test_version_1_shards_join_without_checksums(tmp_path, records):
    files = [write_lmdb(tmp_path / "a.lmdb", part(records, 0, 4)[0], records.v1_meta(count=4)),
             write_lmdb(tmp_path / "b.lmdb", part(records, 4, 12)[0], records.v1_meta(count=8))]
    with open_dataset(files) as store:
        assert store.checksums is None and store.meta["format_version"] == 1
        assert [bytes(store.read_checked(i)) for i in range(12)] == records.images
        assert [s.checksums for s in store.stores] == [None, None]


def test_a_list_of_shards_is_named_by_its_first_and_opened_once_each(tmp_path, records):
    files = shards(tmp_path, records, cuts=(0, 3, 6, 12))
    assert error_of(ShardedStore.from_paths, []) == "an empty list of shard files: name at least one packed file"
    with ShardedStore.from_paths(files[:1] + files[1:]) as store:
        assert store.filename == f"{files[0]} (+2 more shards)"
    twice = str(tmp_path / "." / os.path.basename(files[1]))
    assert error_of(open_dataset, [*files, twice]) == (f"{twice}: listed twice (also as {files[1]}); "
                                                       "name each shard once")
    missing = str(tmp_path / "nope.lmdb")
    assert error_of(open_dataset, [files[0], missing]) == f"{missing}: no such file or folder"


def test_a_glob_opens_the_shards_it_matches_and_leaves_out_side_files_and_folders(tmp_path, records):
    files = shards(tmp_path, records)
    for side in (".errors.csv", ".partial", ".json"):
        (tmp_path / f"s-00009-of-00002.lmdb{side}").write_text("not a shard")
    (tmp_path / "s-00008-of-00002.lmdb").mkdir()
    pattern = str(tmp_path / "s-*")
    with open_dataset(pattern) as store:
        assert store.filename == pattern and store.files() == files
        assert [bytes(store.read(i)) for i in range(12)] == records.images
    only_side = str(tmp_path / "s-00009*")
    assert error_of(open_dataset, only_side) == (f"{only_side}: the pattern matches no shard file (only 3 side file(s) "
                                                 "or folder(s)); check the path, or open the index OUT.shards.json")
    nothing = str(tmp_path / "t-*")
    assert error_of(open_dataset, nothing) == (f"{nothing}: the pattern matches no shard file; check the path, "
                                               "or open the index OUT.shards.json")


def test_an_index_that_is_missing_a_shard_or_names_one_twice_is_refused(tmp_path, records):
    files = shards(tmp_path, records)
    gone = write_index(tmp_path / "g.shards.json", [files[0], str(tmp_path / "lost.lmdb")], [5, 7], records.classes)
    assert error_of(open_dataset, gone) == (f"{gone}: shard lost.lmdb is missing (no {tmp_path}/lost.lmdb); copy it "
                                            "next to the index, or pack that shard again "
                                            "(feedline pack ... --shard-index K)")
    twice = write_index(tmp_path / "t.shards.json", [files[0], files[0]], [5, 5], records.classes)
    assert error_of(open_dataset, twice) == (f"{twice}: the index names a shard twice; write it again with "
                                             "`feedline pack --join OUT`")
    absent = str(tmp_path / "absent.shards.json")
    assert error_of(ShardedStore.from_index, absent) == f"{absent}: cannot read (No such file or directory)"
    latin = tmp_path / "l.shards.json"
    latin.write_bytes(b'{"format": "feedline-shards", "source": "/data/caf\xe9"}')
    assert error_of(open_dataset, str(latin)).startswith(f"{latin}: not valid JSON (")
    odd = write_index(tmp_path / "v.shards.json", files, [5, 7], records.classes, version=2)
    assert error_of(open_dataset, odd).startswith(f"{odd}: shard index version 2, but this feedline reads version 1")


REJOIN = "Write the index again with `feedline pack --join OUT`"


@pytest.mark.parametrize("change, message", [
    ({"counts": [5, 6]}, "shard s-00001-of-00002.lmdb holds 7 records, the index says 6: it was replaced or "
                         f"packed again. {REJOIN}"),
    ({"pack_id": "p2"}, f"shard s-00000-of-00002.lmdb belongs to another pack than the index; {REJOIN[0].lower()}"
                        f"{REJOIN[1:]}"),
    ({"classes": ["a", "b", "c"]}, "the index's classes differ from its shards'; write it again with "
                                   "`feedline pack --join OUT`"),
    ({"format_version": 1}, "the index says format version 1, the shards are version 2; write it again with "
                            "`feedline pack --join OUT`"),
])
def test_an_index_that_disagrees_with_its_shards_is_refused(tmp_path, records, change, message):
    files, change = shards(tmp_path, records), dict(change)
    counts = change.pop("counts", [5, 7])
    index = write_index(tmp_path / "s.shards.json", files, counts, change.pop("classes", records.classes), **change)
    assert error_of(open_dataset, index) == f"{index}: {message}"


def test_an_index_of_one_shard_is_checked_against_it(tmp_path, records):
    (only,) = shards(tmp_path, records, cuts=(0, 12))
    assert error_of(open_dataset, write_index(tmp_path / "a.shards.json", [only], [12], ["x", "y", "z"])).endswith(
        "the index's classes differ from its shards'; write it again with `feedline pack --join OUT`")
    assert error_of(open_dataset, write_index(tmp_path / "b.shards.json", [only], [12], records.classes,
                                              format_version=1)).endswith(
        "the index says format version 1, the shards are version 2; write it again with `feedline pack --join OUT`")
    with open_dataset(write_index(tmp_path / "c.shards.json", [only], [12], records.classes)) as store:
        assert len(store) == 12 and store.meta["shards"] == [os.path.basename(only)]


def test_files_that_are_not_one_data_set_are_refused_naming_both(tmp_path, records):
    a, meta = part(records, 0, 6)
    b, meta_b = part(records, 6, 12)
    lmdb_a = write_lmdb(tmp_path / "a.lmdb", a, meta)
    cases = {
        "kind": (write_hdf5(tmp_path / "b.h5", b, meta_b),
                 "shards of different formats (hdf5, lmdb); a data set is all LMDB or all HDF5"),
        "version": (write_lmdb(tmp_path / "v.lmdb", b, b.v1_meta()),
                    "shards of different format versions (1, 2); pack them again together with one feedline"),
        "class": (write_lmdb(tmp_path / "c.lmdb", b, b.meta(classes=["class_0", "other", "class_2"])),
                  "shards with different class lists (class 1: 'other' vs 'class_1'); their labels would disagree. "
                  "Pack them again together"),
        "count": (write_lmdb(tmp_path / "n.lmdb", b, b.meta(classes=records.classes + ["class_3"])),
                  "shards with different class lists (4 vs 3 classes); their labels would disagree. "
                  "Pack them again together"),
        "shard": (write_lmdb(tmp_path / "s.lmdb", b, b.meta(shard={"index": 1, "of": 2, "pack_id": "p1"})),
                  "one is a shard of a sharded pack and the other is not"),
    }
    for other, message in cases.values():
        assert error_of(open_dataset, [lmdb_a, other]) == f"{other} and {lmdb_a}: {message}"
    (tmp_path / "other").mkdir()
    one, two = shards(tmp_path, records, pack_id="p1")[0], shards(tmp_path / "other", records, pack_id="p2")[1]
    assert error_of(open_dataset, [one, two]) == (f"{two} and {one}: shards of different packs (packed from other "
                                                  "files or with other options); pack them again together")


@pytest.mark.parametrize("of, given, message", [
    (6, [0], "shard(s) 1, 2, 3, 4, 5 of 6 missing from the set"),
    (7, [0], "shard(s) 1, 2, 3, 4, 5, ... of 7 missing from the set"),
    (3, [2], "shard(s) 0, 1 of 3 missing from the set"),
])
def test_a_set_missing_shards_names_the_first_five(tmp_path, records, of, given, message):
    files = [write_lmdb(tmp_path / f"s{k}.lmdb", *part(records, 0, 2, shard={"index": k, "of": of, "pack_id": "p"}))
             for k in given]
    assert error_of(open_dataset, files) == (f"{files[0]}: {message}; give every shard (a glob such as "
                                             "OUT-*-of-*.lmdb, or the index OUT.shards.json)")


def test_a_set_with_a_shard_twice_or_one_outside_its_numbering_is_refused(tmp_path, records):
    files = shards(tmp_path, records, cuts=(0, 4, 8, 12))
    copy = str(tmp_path / "copy.lmdb")
    shutil.copy(files[1], copy)
    assert error_of(open_dataset, [*files, copy]) == f"{copy} and {files[1]} are both shard 1 of 3; keep one"
    stray = write_lmdb(tmp_path / "stray.lmdb", *part(records, 0, 2, shard={"index": 3, "of": 3, "pack_id": "p1"}))
    assert error_of(open_dataset, [*files, stray]) == (f"{stray}: shard 3 of 3, not one of 0..2: its metadata is "
                                                       "damaged. Pack that shard again")
    with open_dataset(files[::-1]) as store:
        assert store.files() == files and [bytes(store.read(i)) for i in range(12)] == records.images
    (tmp_path / "one").mkdir()
    (alone,) = shards(tmp_path / "one", records, cuts=(0, 12))
    with open_dataset([alone]) as store:
        assert store.filename == alone and len(store) == 12


def test_sharded_ranges_come_from_the_shards_a_span_reaches_only(tmp_path, records):
    files = shards(tmp_path, records, kind="hdf5")
    with open_dataset(files) as store, open_dataset(files[0]) as first, open_dataset(files[1]) as second:
        assert store.byte_ranges(0, 3) == first.byte_ranges(0, 3)
        assert store.byte_ranges(6, 12) == second.byte_ranges(1, 7)
        assert store.byte_ranges(4, 6) == first.byte_ranges(4, 5) + second.byte_ranges(0, 1)
        assert store.byte_ranges(5, 5) == [] and store.will_need(5, 5) == 0
        assert store.byte_lengths().tolist() == [len(b) for b in records.images]
