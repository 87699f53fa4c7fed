"""Records go to the writer one by one: an LMDB chunk that outgrows the map is rolled back
and packed again (ChunkLost), an HDF5 chunk is staged in several writes, and either way
the result is the uninterrupted pack's, with each file counted once."""
from __future__ import annotations

import logging

import pytest

import helpers_images as imgs
from pack_helpers import committed, interrupt_after, snapshot

from converters import pack
from converters.progress import NoBar


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> str:
    """Photos plus a converted file and two bad ones, so a chunk packed again holds
    records, conversions and skips."""
    from feedline.sample import make_photo_folder
    root = tmp_path_factory.mktemp("chunks") / "src"
    make_photo_folder(str(root), n=16, classes=2, seed=7, sizes=[(120, 90), (90, 120)])
    imgs.GOOD_BUILDERS["rgba.png"](str(root / "class_000" / "rgba.png"))
    (root / "class_001" / "empty.jpg").write_bytes(b"")
    (root / "class_001" / "text.png").write_text("hello")
    return str(root)


@pytest.fixture(scope="module")
def reference(src, tmp_path_factory):
    folder = tmp_path_factory.mktemp("reference")
    out = {}
    for ext in ("lmdb", "h5"):
        pack(src, str(folder / f"ref.{ext}"))
        out[ext] = snapshot(str(folder / f"ref.{ext}"))
    return out


class CountingBar(NoBar):
    """Counts the files a pack reports, as tqdm would show them."""

    def __init__(self, initial: int):
        self.n = initial

    def update(self, n: int = 1) -> None:
        self.n += n


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_chunk_that_outgrows_the_lmdb_map_is_packed_again(src, reference, tmp_path, monkeypatch, caplog, jobs):
    import converters.lmdb_writer as lw
    import converters.packer as packer
    monkeypatch.setattr(lw, "INITIAL_MAP_SIZE", 96 * 1024)   # full after a few records
    bars = []
    monkeypatch.setattr(packer, "progress_bar", lambda wanted, total, initial: bars.append(CountingBar(initial))
                        or bars[-1])
    out = str(tmp_path / "o.lmdb")
    with caplog.at_level(logging.DEBUG, logger="converters.packer"):
        report = pack(src, out, commit_every=50, jobs=jobs)   # one chunk: the map fills inside it
    again = [r.getMessage() for r in caplog.records if "packing again from file" in r.getMessage()]
    assert again and all("map was full at record" in m and m.endswith("from file 0") for m in again)
    assert snapshot(out) == reference["lmdb"]
    assert report.packed + len(report.skipped) == report.found == bars[0].n == 19


def test_hdf5_chunks_staged_in_many_writes(src, reference, tmp_path, monkeypatch):
    import converters.hdf5_writer as hw
    monkeypatch.setattr(hw, "_STAGE_BYTES", 1)   # every record is written as it comes
    out = str(tmp_path / "o.h5")
    pack(src, out, commit_every=4)
    assert snapshot(out) == reference["h5"]


def test_hdf5_staged_bytes_past_the_last_commit_are_cut_on_resume(src, reference, tmp_path, monkeypatch):
    """Interrupted in its third chunk after records of that chunk were written: resume cuts
    them (the journal does not name them) and packs that chunk again."""
    import converters.hdf5_writer as hw
    monkeypatch.setattr(hw, "_STAGE_BYTES", 1)
    out = str(tmp_path / "o.h5")
    with monkeypatch.context() as m:
        interrupt_after(m, 11)
        with pytest.raises(KeyboardInterrupt):
            pack(src, out, commit_every=4, jobs=1)
    assert committed(out) == 8
    staged = (tmp_path / "o.h5.partial.images").stat().st_size
    report = pack(src, out, commit_every=4, resume=True)
    assert report.resumed_from == 8
    assert snapshot(out) == reference["h5"]
    assert staged > 0
