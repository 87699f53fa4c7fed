"""The LMDB store: zero-copy reads, truncated, lost or damaged files named at each read,
read-only files, and the read-ahead ranges found by walking the file's pages (one environment
per file and forked children: test_lmdb_environment.py)."""
from __future__ import annotations

import logging
import os
import shutil
import tempfile

import lmdb
import numpy as np
import pytest
from process_helpers import in_child
from store_helpers import DAMAGED_TAIL, error_of, photos, records
from storefiles import write_lmdb

from feedline import open_dataset
from feedline.dataset.format import image_key
from feedline.stores import lmdb_store
from feedline.stores.lmdb_store import LmdbStore


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


