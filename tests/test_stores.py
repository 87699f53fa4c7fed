"""Stores: recognition by content, random access, threads, fork, and damaged files."""
from __future__ import annotations

import multiprocessing
import os
import threading

import cv2
import h5py
import lmdb
import numpy as np
import pytest
from process_helpers import in_child
from storefiles import WRITERS, make_records, write_hdf5, write_lmdb

from feedline import StoreError, open_dataset
from feedline.dataset.format import FORMAT_VERSION, LMDB_IMAGE_PREFIX
from feedline.sample import make_photo_folder

KINDS = ("lmdb", "hdf5")


@pytest.fixture(scope="module")
def records():
    return make_records(n=12, classes=3)


@pytest.fixture(params=KINDS)
def packed(request, tmp_path, records):
    """(kind, filename) of a sound store holding ``records``."""
    kind = request.param
    return kind, WRITERS[kind](tmp_path / f"data.{kind}", records)


def read_all(store) -> list[bytes]:
    return [bytes(store.read(i)) for i in range(len(store))]


# -- recognition ---------------------------------------------------------------------------------

def test_lmdb_named_h5_opens_as_lmdb(tmp_path, records):
    path = write_lmdb(tmp_path / "looks_like.h5", records)
    with open_dataset(path) as store:
        assert store.kind == "lmdb"
        assert read_all(store) == records.images


def test_hdf5_named_lmdb_opens_as_hdf5(tmp_path, records):
    path = write_hdf5(tmp_path / "looks_like.lmdb", records)
    with open_dataset(path) as store:
        assert store.kind == "hdf5"
        assert read_all(store) == records.images


def test_hdf5_with_a_user_block_opens(tmp_path, records):
    path = write_hdf5(tmp_path / "ub.h5", records, userblock_size=1024)
    with open_dataset(path) as store:
        assert store.kind == "hdf5"
        assert read_all(store) == records.images


def test_open_accepts_pathlike(tmp_path, records):
    write_lmdb(tmp_path / "p.lmdb", records)
    with open_dataset(tmp_path / "p.lmdb") as store:
        assert len(store) == len(records)


# -- random access -------------------------------------------------------------------------------

def test_accessors(packed, records):
    kind, path = packed
    with open_dataset(path) as store:
        assert store.kind == kind
        assert store.filename == path
        assert len(store) == len(records)
        assert store.classes == records.classes
        assert store.meta == records.meta()
        assert read_all(store) == records.images
        for i in range(len(records)):
            assert store.label(i) == records.labels[i]
            assert isinstance(store.label(i), int)
            assert store.size(i) == records.sizes[i]
            assert store.path(i) == records.paths[i]
        assert store.labels.tolist() == records.labels
        assert store.labels.dtype == np.int64
        assert store.sizes.tolist() == [list(s) for s in records.sizes]
        assert store.sizes.shape == (len(records), 2)
        assert store.byte_lengths().tolist() == [len(b) for b in records.images]
        assert store.layout_problems() == []
        assert "12 records" in repr(store)


def test_indexing(packed, records):
    _, path = packed
    with open_dataset(path) as store:
        assert bytes(store.read(-1)) == records.images[-1]
        assert store.path(-2) == records.paths[-2]
        assert bytes(store.read(np.int64(3))) == records.images[3]
        with pytest.raises(IndexError, match="record 12 out of range"):
            store.read(12)
        with pytest.raises(IndexError):
            store.label(-13)
        with pytest.raises(TypeError, match="integer"):
            store.read(1.0)


def test_read_after_close_reopens(packed, records):
    _, path = packed
    store = open_dataset(path)
    assert bytes(store.read(0)) == records.images[0]
    store.close()
    assert bytes(store.read(5)) == records.images[5]
    store.close()


def test_two_stores_on_one_file(packed, records):
    """py-lmdb refuses a second open of a file in one process; stores share one environment."""
    _, path = packed
    first = open_dataset(path)
    second = open_dataset(path)
    assert bytes(first.read(1)) == bytes(second.read(1)) == records.images[1]
    first.close()
    assert read_all(second) == records.images
    second.close()
    with open_dataset(path) as third:
        assert read_all(third) == records.images


def test_empty_store(tmp_path):
    empty = make_records(n=0, classes=2)
    for kind, write in WRITERS.items():
        with open_dataset(write(tmp_path / f"empty.{kind}", empty)) as store:
            assert len(store) == 0
            assert store.classes == empty.classes
            assert store.byte_lengths().tolist() == []


def test_eight_threads_read_everything(packed, records):
    _, path = packed
    errors: list[str] = []
    barrier = threading.Barrier(8)

    def reader(k: int) -> None:
        barrier.wait()
        order = np.random.default_rng(k).permutation(len(records))
        for _ in range(5):
            for i in order:
                if bytes(store.read(int(i))) != records.images[i]:
                    errors.append(f"thread {k}: record {i} differs")
                    return

    with open_dataset(path) as store:
        threads = [threading.Thread(target=reader, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


def _child_reads(store, expected: list[bytes]) -> None:
    # Runs in the forked child: a mismatch or an exception gives a non-zero exit code.
    if [bytes(store.read(i)) for i in range(len(store))] != expected:
        raise SystemExit(3)
    if store.labels.tolist() != [int(store.label(i)) for i in range(len(store))]:
        raise SystemExit(4)


def test_read_after_fork_multiprocessing(packed, records):
    _, path = packed
    with open_dataset(path) as store:
        assert read_all(store) == records.images   # handles are live in the parent
        ctx = multiprocessing.get_context("fork")
        children = [ctx.Process(target=_child_reads, args=(store, records.images)) for _ in range(2)]
        for child in children:
            child.start()
        for child in children:
            child.join(timeout=60)
        assert [child.exitcode for child in children] == [0, 0]
        assert read_all(store) == records.images   # the parent is untouched by its children


def _child_opens_its_own(path: str, expected: list[bytes]) -> None:
    with open_dataset(path) as store:
        if read_all(store) != expected:
            raise SystemExit(3)


def test_child_opens_the_file_its_parent_has_open(packed, records):
    _, path = packed
    with open_dataset(path) as store:
        assert read_all(store) == records.images
        child = multiprocessing.get_context("fork").Process(target=_child_opens_its_own,
                                                            args=(path, records.images))
        child.start()
        child.join(timeout=60)
        assert child.exitcode == 0
        assert read_all(store) == records.images


def test_read_after_os_fork_with_threads_reading(packed, records):
    """Fork while the parent's own threads have transactions open; the child reports via a pipe."""
    _, path = packed
    with open_dataset(path) as store:
        threads = [threading.Thread(target=read_all, args=(store,)) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        code, report = in_child(lambda: b"ok" if read_all(store) == records.images else b"mismatch")
        assert code == 0
        assert report == b"ok"
        assert read_all(store) == records.images


# -- files that are not (sound) stores -----------------------------------------------------------

def _expect_store_error(path, match: str | None = None) -> StoreError:
    with pytest.raises(StoreError) as info:
        with open_dataset(path) as store:
            read_all(store)
    assert os.path.basename(str(path)) in str(info.value)
    if match is not None:
        assert match in str(info.value)
    return info.value


def test_text_empty_and_random_files(tmp_path):
    (tmp_path / "notes.lmdb").write_text("just some text\n" * 50)
    _expect_store_error(tmp_path / "notes.lmdb", "not a feedline store")
    (tmp_path / "empty.h5").write_bytes(b"")
    _expect_store_error(tmp_path / "empty.h5", "empty")
    (tmp_path / "noise.lmdb").write_bytes(np.random.default_rng(0).bytes(100_000))
    _expect_store_error(tmp_path / "noise.lmdb")
    _expect_store_error(tmp_path / "missing.lmdb", "no such file")


def test_plain_lmdb_without_meta(tmp_path, records):
    _expect_store_error(write_lmdb(tmp_path / "plain.lmdb", records, with_meta=False), "not a feedline store")
    env = lmdb.open(str(tmp_path / "other.mdb"), subdir=False, lock=False)
    with env.begin(write=True) as txn:
        txn.put(b"hello", b"world")
    env.close()
    _expect_store_error(tmp_path / "other.mdb", "not a feedline store")


def test_plain_hdf5_without_meta(tmp_path, records):
    _expect_store_error(write_hdf5(tmp_path / "plain.h5", records, with_meta=False), "not a feedline store")
    with h5py.File(tmp_path / "other.h5", "w") as fh:
        fh["x"] = np.arange(10)
    _expect_store_error(tmp_path / "other.h5", "not a feedline store")


@pytest.mark.parametrize("kind", KINDS)
def test_newer_format_version(tmp_path, records, kind):
    path = WRITERS[kind](tmp_path / f"new.{kind}", records, records.meta(format_version=FORMAT_VERSION + 1))
    _expect_store_error(path, "upgrade feedline")


@pytest.mark.parametrize("kind", KINDS)
def test_meta_that_is_not_json_or_not_ours(tmp_path, records, kind):
    path = WRITERS[kind](tmp_path / f"other.{kind}", records, {"format": "somebody-else", "count": 12})
    _expect_store_error(path, "not a feedline store")


@pytest.mark.parametrize("kind", KINDS)
def test_count_disagreeing_with_columns(tmp_path, records, kind):
    path = WRITERS[kind](tmp_path / f"count.{kind}", records, records.meta(count=len(records) + 1))
    _expect_store_error(path, "disagree")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("keep", [0.01, 0.3, 0.6, 0.95, -1])
def test_truncated_files(tmp_path, records, kind, keep):
    path = WRITERS[kind](tmp_path / f"cut.{kind}", records)
    size = os.path.getsize(path)
    os.truncate(path, size - 1 if keep == -1 else int(size * keep))
    # For LMDB this used to open and then die of SIGBUS on the first read past the end.
    _expect_store_error(path)


def test_damaged_lmdb_columns(tmp_path, records):
    path = write_lmdb(tmp_path / "cols.lmdb", records,
                      extra_keys={b"feedline/col/path_offsets": np.arange(13, dtype="<i8")[::-1].tobytes()})
    _expect_store_error(path, "path column")
    path = write_lmdb(tmp_path / "odd.lmdb", records, extra_keys={b"feedline/col/labels": b"\x01\x02\x03"})
    _expect_store_error(path, "damaged")


def test_hdf5_with_compressed_images_is_refused(tmp_path, records):
    path = write_hdf5(tmp_path / "c.h5", records)
    with h5py.File(path, "a") as fh:
        data = fh["images"][...]
        del fh["images"]
        fh.create_dataset("images", data=data, compression="gzip")
    _expect_store_error(path, "compressed")


def test_missing_lmdb_record_names_index_and_path(tmp_path, records):
    with open_dataset(write_lmdb(tmp_path / "gap.lmdb", records, skip=(4,))) as store:
        assert bytes(store.read(3)) == records.images[3]
        with pytest.raises(StoreError, match=r"record 4 \(class_1/img_004.jpg\) is missing"):
            store.read(4)


def test_lmdb_layout_problems(tmp_path, records):
    extra = {LMDB_IMAGE_PREFIX + b"%010d" % 12: b"x", b"feedline/journal/00000000": b"{}"}
    with open_dataset(write_lmdb(tmp_path / "extra.lmdb", records, extra_keys=extra)) as store:
        problems = store.layout_problems()
    assert len(problems) == 2
    assert "beyond the 12 records" in problems[0]
    assert "journal" in problems[1]


# -- image folders -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def six_photos(tmp_path_factory):
    root = tmp_path_factory.mktemp("photos")
    make_photo_folder(str(root), n=6, classes=2, seed=1)
    return root


def test_folder_store(six_photos):
    with open_dataset(six_photos) as store:
        assert store.kind == "folder"
        assert len(store) == 6
        assert store.classes == ["class_000", "class_001"]
        assert store.labels.tolist() == [0, 0, 0, 1, 1, 1]
        assert store.path(0) == "class_000/img_0000000.jpg"
        for i in range(len(store)):
            data = (six_photos / store.path(i)).read_bytes()
            assert bytes(store.read(i)) == data
            decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
            assert store.size(i) == decoded.shape[:2]
        assert store.sizes.shape == (6, 2)
        assert store.byte_lengths().tolist() == [os.path.getsize(six_photos / store.path(i)) for i in range(6)]


def test_folder_without_images(tmp_path):
    (tmp_path / "nothing").mkdir()
    _expect_store_error(tmp_path / "nothing", "no images")


def test_lmdb_directory_is_explained(tmp_path):
    (tmp_path / "dirdb").mkdir()
    (tmp_path / "dirdb" / "data.mdb").write_bytes(b"")
    _expect_store_error(tmp_path / "dirdb", "single-file LMDB")
