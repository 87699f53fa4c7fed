"""The HDF5 store: metadata and columns however another writer stored them, and every damage
to the images dataset or its offsets named in one line. Real files written by
tests/storefiles.py, rewritten with h5py."""
from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest
from process_helpers import fork_storm
from store_helpers import DAMAGED_TAIL, error_of, records
from storefiles import Records, write_hdf5

from feedline import open_dataset


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


@pytest.mark.slow
def test_two_hundred_forks_taken_while_threads_read_never_hang_a_child(tmp_path, records):
    """A child maps the file itself and leaves its parent's map alone (HDF5 is opened once, at
    open: h5py's own lock waits out a fork)."""
    path = write_hdf5(tmp_path / "busy.h5", records)
    assert fork_storm(path, 200) == {"forked": 200, "hung": 0, "wrong": 0, "failed": 0, "problems": []}
