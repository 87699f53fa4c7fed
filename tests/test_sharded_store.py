"""The sharded store: a set opened from its index, a list or a glob, described from its index
and first shard, and every set that is not one data set refused naming the files."""
from __future__ import annotations

import os
import shutil

import pytest
from store_helpers import error_of, part, records, shards, write_index
from storefiles import write_hdf5, write_lmdb

from feedline import open_dataset
from feedline.dataset.format import checksum
from feedline.stores import ShardedStore


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
