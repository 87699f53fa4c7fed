"""pack --shuffle SEED: the same records in a random order from the seed (classes side by
side on disk, for quasi-random reading), the same order every time, and a loader warning
when quasi-random windows read a class-sorted store."""
from __future__ import annotations

import logging

import pytest

from converters import pack
from feedline import FeedLoader, OrderSpec, open_dataset


def records(path):
    with open_dataset(path) as store:
        return [(store.path(i), store.label(i), bytes(store.read(i))) for i in range(len(store))]


@pytest.mark.parametrize("ext", ["lmdb", "h5"])
def test_shuffled_pack_holds_the_same_records_in_a_seeded_order(photo_folder, tmp_path, ext):
    plain = records(pack(str(photo_folder), str(tmp_path / f"plain.{ext}")).out)
    first = records(pack(str(photo_folder), str(tmp_path / f"a.{ext}"), shuffle=7).out)
    again = records(pack(str(photo_folder), str(tmp_path / f"b.{ext}"), shuffle=7).out)
    other = records(pack(str(photo_folder), str(tmp_path / f"c.{ext}"), shuffle=8).out)
    assert sorted(first) == sorted(plain) and first == again and first != other
    labels = [label for _, label, _ in first]
    runs = sum(a != b for a, b in zip(labels, labels[1:]))
    assert runs > 3 * (len(set(labels)) - 1)  # classes interleave (sorted: one change per class)
    with open_dataset(str(tmp_path / f"a.{ext}")) as store:
        assert store.meta["pack_options"]["shuffle"] == 7


def test_resume_refuses_another_seed(photo_folder, tmp_path, monkeypatch):
    import converters.packer as packer
    out = str(tmp_path / "o.h5")  # HDF5 keeps its staged bytes and journal at an interrupted rename
    real = packer.os.replace

    def interrupt(a, b):
        raise KeyboardInterrupt
    monkeypatch.setattr(packer.os, "replace", interrupt)
    with pytest.raises(KeyboardInterrupt):
        pack(str(photo_folder), out, shuffle=1, commit_every=8)
    monkeypatch.setattr(packer.os, "replace", real)
    with pytest.raises(Exception, match="shuffle"):
        pack(str(photo_folder), out, shuffle=2, resume=True, commit_every=8)


def test_quasi_random_on_a_class_sorted_store_warns(photo_folder, tmp_path, caplog):
    sorted_store = pack(str(photo_folder), str(tmp_path / "s.lmdb")).out
    shuffled_store = pack(str(photo_folder), str(tmp_path / "x.lmdb"), shuffle=3).out
    for store, warned in ((sorted_store, True), (shuffled_store, False)):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="feedline"):
            FeedLoader(store, batch_size=4, size=32, device="cpu", shuffle=True,
                       order=OrderSpec("quasi-random", quasi_random=(2, 2))).close()
        assert any("--shuffle" in r.getMessage() for r in caplog.records) == warned, store
