"""open_dataset (feedline/stores/__init__.py): an image folder with a labels CSV, a missing path
(and the shard index that names it), an index with leading white space, an LMDB directory."""
from __future__ import annotations

from store_helpers import error_of, folder, records, shards, write_index

from feedline import open_dataset
from feedline.stores.folder_store import FolderStore


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
