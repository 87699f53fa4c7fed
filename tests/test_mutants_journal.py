"""The pack's journal, writers and resume, where mutation testing found them unpinned
(tests/MUTATION.md): every record's bytes checked against its source file (not against another
pack made by the same code), HDF5's copy when the images land elsewhere (in the kernel, and
through a buffer, over more than one buffer), LMDB's map growth, the message when nothing
could be packed, and the progress bar's rate."""
from __future__ import annotations

import io
import logging
import os
import re
import sys

import cv2
import numpy as np
import pytest

import feedline
from converters import pack
from feedline.errors import PackError

MiB = 1 << 20


def noise_jpeg(path, side: int, seed: int, size: int | None = None) -> int:
    """A real JPEG of noise (barely compressible), padded with COM segments to exactly
    ``size`` bytes when given; returns its size."""
    rng = np.random.default_rng(seed)
    ok, buf = cv2.imencode(".jpg", rng.integers(0, 256, (side, side, 3), dtype=np.uint8),
                           [cv2.IMWRITE_JPEG_QUALITY, 90])
    data = buf.tobytes()
    if size is not None:
        pad = size - len(data)
        assert pad == 0 or pad >= 4, (size, len(data))
        segments = []
        while pad:
            n = min(pad, 65535 + 2)
            if 0 < pad - n < 4:
                n = pad - 4
            segments.append(b"\xff\xfe" + (n - 2).to_bytes(2, "big") + b"c" * (n - 4))
            pad -= n
        data = data[:2] + b"".join(segments) + data[2:]
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)
    return len(data)


def stored_as_sources(out: str, src: str) -> int:
    """Every record of ``out`` holds its source file's bytes (JPEGs are stored as they are)."""
    with feedline.open_dataset(out) as ds:
        for i in range(len(ds)):
            with open(os.path.join(src, ds.path(i)), "rb") as fh:
                assert bytes(ds.read(i)) == fh.read(), ds.path(i)
        return len(ds)


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> str:
    """Seven noise JPEGs of exactly 8 MiB + 1 bytes in all: a buffered copy takes two reads,
    the second of one byte."""
    root = tmp_path_factory.mktemp("big") / "src"
    sizes = [1_000_000] * 6 + [8 * MiB + 1 - 6_000_000]
    for k, size in enumerate(sizes):
        noise_jpeg(root / "c" / f"{k}.jpg", 900, seed=k, size=size)
    return str(root)


# -- HDF5: the images copied into the container ----------------------------------------------------

@pytest.fixture
def images_elsewhere(monkeypatch):
    """Staged bytes at 8192, where HDF5 puts the images dataset at 2048: finish copies them."""
    import converters.hdf5_writer as hw
    monkeypatch.setattr(hw, "images_offset", lambda: 8192)


def test_hdf5_copies_the_images_in_the_kernel_byte_for_byte(big, tmp_path, images_elsewhere, caplog):
    caplog.set_level(logging.DEBUG, logger="converters.hdf5_writer")
    out = str(tmp_path / "k.h5")
    pack(big, out)
    assert stored_as_sources(out, big) == 7
    said = [r.getMessage() for r in caplog.records if r.name == "converters.hdf5_writer"]
    assert said == ["HDF5 put the images at 2048, not 8192: copying them"]   # no buffer copy


def test_hdf5_copies_through_a_buffer_where_the_kernel_cannot(big, tmp_path, images_elsewhere, monkeypatch, caplog):
    import errno

    import converters.hdf5_writer as hw

    def cross_device(*args):
        raise OSError(errno.EXDEV, "Invalid cross-device link")
    monkeypatch.setattr(hw.os, "copy_file_range", cross_device)
    caplog.set_level(logging.DEBUG, logger="converters.hdf5_writer")
    out = str(tmp_path / "b.h5")
    pack(big, out)
    assert stored_as_sources(out, big) == 7
    said = [r.getMessage() for r in caplog.records if r.name == "converters.hdf5_writer"]
    assert said[-1] == ("copy_file_range unavailable ([Errno 18] Invalid cross-device link); "
                        "copying through a buffer")


# -- LMDB: the map grows ---------------------------------------------------------------------------

def growth(caplog, out: str) -> list[int]:
    """The map sizes (MiB) that the pack of ``out`` grew its map to, in order."""
    said = [r.getMessage() for r in caplog.records if r.name == "converters.lmdb_writer"]
    sizes = [re.fullmatch(rf"{re.escape(out)}\.partial: map full, growing it to (\d+) MiB", s) for s in said]
    assert all(sizes), said
    return [int(m.group(1)) for m in sizes]


def test_lmdb_map_doubles_or_makes_room_for_four_times_the_lost_chunk(tmp_path, monkeypatch, caplog):
    import converters.lmdb_writer as lw
    caplog.set_level(logging.DEBUG, logger="converters")
    # Small records, one per commit, in a 1 MiB map: full after a few, then doubled each time.
    small = tmp_path / "small"
    for k in range(24):
        noise_jpeg(small / "c" / f"{k:02d}.jpg", 256, seed=k)
    monkeypatch.setattr(lw, "INITIAL_MAP_SIZE", MiB)
    out = str(tmp_path / "s.lmdb")
    pack(str(small), out, commit_every=1)
    assert stored_as_sources(out, str(small)) == 24
    grown = growth(caplog, out)
    assert grown == [2 ** (k + 1) for k in range(len(grown))] and len(grown) >= 1
    # One record far larger than the map: grown at once to hold four times it, not doubled again and again.
    caplog.clear()
    large = tmp_path / "large"
    size = noise_jpeg(large / "c" / "big.jpg", 1400, seed=1)
    assert size > MiB
    monkeypatch.setattr(lw, "INITIAL_MAP_SIZE", 64 << 10)
    out = str(tmp_path / "l.lmdb")
    pack(str(large), out)
    assert stored_as_sources(out, str(large)) == 1
    assert growth(caplog, out) == [((64 << 10) + 4 * size) >> 20]
    assert redone(caplog) == [f"{out}.partial: the LMDB map was full at record 0; packing again from file 0"]
    # A chunk of several records, full at its k-th: room for four times the whole chunk, not its last record.
    caplog.clear()
    several = tmp_path / "several"
    for k in range(6):
        noise_jpeg(several / "c" / f"{k}.jpg", 560, seed=k, size=300_000)
    monkeypatch.setattr(lw, "INITIAL_MAP_SIZE", MiB)
    out = str(tmp_path / "m.lmdb")
    pack(str(several), out, commit_every=10)
    assert stored_as_sources(out, str(several)) == 6
    (said,) = redone(caplog)
    k = int(re.fullmatch(rf"{re.escape(out)}\.partial: the LMDB map was full at record (\d+); packing again "
                         r"from file 0", said).group(1)) + 1
    assert k > 1 and growth(caplog, out) == [(MiB + 4 * k * 300_000) >> 20]


def redone(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "converters.packer" and "packing again" in r.getMessage()]


def test_lmdb_map_full_at_the_commit_packs_the_chunk_again(tmp_path, monkeypatch, caplog):
    """The journal entry of a chunk of long paths does not fit where its images did: the whole
    chunk is added again in a larger map (a commit alone, without its images, would lose them)."""
    import converters.lmdb_writer as lw
    caplog.set_level(logging.DEBUG, logger="converters")
    deep = tmp_path / "src" / ("c" * 250) / ("d" * 250) / ("e" * 250) / ("f" * 250)
    ok, tiny = cv2.imencode(".jpg", np.full((8, 8, 3), 128, np.uint8))
    deep.mkdir(parents=True)
    for k in range(30):
        (deep / (f"{k:03d}" + "g" * 240 + ".jpg")).write_bytes(tiny.tobytes())
    monkeypatch.setattr(lw, "INITIAL_MAP_SIZE", 64 << 10)
    out = str(tmp_path / "o.lmdb")
    pack(str(tmp_path / "src"), out)
    assert redone(caplog)[0] == f"{out}.partial: the LMDB map was full at a commit; packing again from file 0"
    assert stored_as_sources(out, str(tmp_path / "src")) == 30


# -- what the packer says --------------------------------------------------------------------------

def test_nothing_packed_counts_the_reasons_and_names_the_first(tmp_path):
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "e1.jpg").write_bytes(b"")
    (src / "a" / "e2.jpg").write_bytes(b"")
    (src / "a" / "t.jpg").write_text("hello" * 20)
    with pytest.raises(PackError) as err:
        pack(str(src), str(tmp_path / "o.lmdb"))
    assert str(err.value) == (f"{src}: none of the 3 image files could be packed (empty: 2, not-an-image: 1); "
                              "first: a/e1.jpg: empty: zero-byte file; nothing written")
    assert sorted(os.listdir(tmp_path)) == ["src"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_bar_counts_files_and_shows_the_read_rate(tmp_path, monkeypatch):
    from feedline.sample import make_photo_folder
    make_photo_folder(str(tmp_path / "src"), n=70, classes=2, seed=3, sizes=[(320, 240)])
    screen = Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    pack(str(tmp_path / "src"), str(tmp_path / "o.lmdb"), jobs=1)
    last = screen.getvalue().split("\r")[-1]
    assert re.search(r"70/70 \[.*, (\d+\.\d) MiB/s\]", last), last
    assert float(re.search(r"(\d+\.\d) MiB/s", last).group(1)) > 0


# -- a resumed pack reports what an uninterrupted one reports ---------------------------------------

@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> str:
    """Photos, files that are converted (PNG, CMYK, EXIF-rotated) and bad ones, in two classes."""
    import helpers_images as imgs
    from feedline.sample import make_photo_folder
    root = tmp_path_factory.mktemp("mixed") / "src"
    make_photo_folder(str(root), n=10, classes=2, seed=8, sizes=[(96, 64), (64, 96)])
    for name in ("rgba.png", "cmyk.jpg", "rotated.jpg"):
        imgs.GOOD_BUILDERS[name](str(root / "class_001" / name))
    (root / "class_000" / "empty.jpg").write_bytes(b"")
    (root / "class_001" / "text.png").write_text("hello")
    return str(root)


def interrupt_at(monkeypatch, src: str, k: int) -> None:
    """Reading the k-th file (in scan order) raises KeyboardInterrupt, as Ctrl-C would."""
    import converters.packer as packer
    from feedline.scan import scan_folder
    real, stop = packer.check_file, scan_folder(src).paths[k - 1]

    def flaky(root, rel, options):
        if rel == stop:
            raise KeyboardInterrupt
        return real(root, rel, options)
    monkeypatch.setattr(packer, "check_file", flaky)


def report_fields(report) -> dict:
    fields = dict(vars(report))
    for name in ("seconds", "resumed_from", "out", "error_report"):
        fields.pop(name)
    return fields


@pytest.mark.parametrize("ext", ["lmdb", "h5"])
def test_a_resumed_pack_reports_and_says_what_an_uninterrupted_one_does(mixed, tmp_path, monkeypatch, caplog, ext):
    whole = pack(mixed, str(tmp_path / f"whole.{ext}"), commit_every=3)
    assert whole.converted == 3 and len(whole.skipped) == 2 and whole.packed == 13 and whole.found == 15
    out = str(tmp_path / f"o.{ext}")
    caplog.set_level(logging.INFO, logger="converters.packer")
    with monkeypatch.context() as m:
        interrupt_at(m, mixed, 11)
        with pytest.raises(KeyboardInterrupt):
            pack(mixed, out, commit_every=3, jobs=1)
    said = [r.getMessage() for r in caplog.records if r.name == "converters.packer"]
    assert said == [f"interrupted: 9 of 15 files committed in {out}.partial; rerun with --resume to continue"]
    caplog.clear()
    resumed = pack(mixed, out, commit_every=3, resume=True)
    said = [r.getMessage() for r in caplog.records if r.name == "converters.packer"]
    assert said == ["resuming after 9 of 15 files"]
    assert resumed.resumed_from == 9
    assert report_fields(resumed) == report_fields(whole)
    assert resumed.error_report == out + ".errors.csv"
    assert resumed.bytes_out == sum(len(r) for r in records_of(out)) and resumed.bytes_in > 0
    caplog.clear()
    again = str(tmp_path / f"fresh.{ext}")
    assert report_fields(pack(mixed, again, commit_every=3, resume=True)) == report_fields(whole)
    said = [r.getMessage() for r in caplog.records if r.name == "converters.packer"]
    assert said == [f"{again}.partial: nothing to resume; packing from the start"]


def records_of(out: str) -> list[bytes]:
    with feedline.open_dataset(out) as ds:
        return [bytes(ds.read(i)) for i in range(len(ds))]


# -- HDF5 staging: what a resume finds --------------------------------------------------------------

def interrupted(src: str, out: str, monkeypatch, k: int = 11) -> None:
    """Ctrl-C while reading the 11th file, with 9 files committed (3 chunks)."""
    with monkeypatch.context() as m:
        interrupt_at(m, src, k)
        with pytest.raises(KeyboardInterrupt):
            pack(src, out, commit_every=3, jobs=1)


def test_hdf5_stages_the_images_where_hdf5_puts_them_and_writes_them_once(mixed, tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)   # asking HDF5 where it puts them leaves no file behind
    caplog.set_level(logging.DEBUG, logger="converters.hdf5_writer")
    pack(mixed, "o.h5")
    assert not [r for r in caplog.records if r.name == "converters.hdf5_writer"]   # no copy
    assert sorted(os.listdir(tmp_path)) == ["o.h5", "o.h5.errors.csv"]


def test_hdf5_resume_refuses_a_journal_that_is_not_one(mixed, tmp_path, monkeypatch):
    out = str(tmp_path / "o.h5")
    interrupted(mixed, out, monkeypatch)
    journal = out + ".partial.journal"
    lines = open(journal, "rb").read().splitlines(keepends=True)
    with open(journal, "wb") as fh:
        fh.write(b"[1, 2]\n" + b"".join(lines[1:]))
    with pytest.raises(PackError) as err:
        pack(mixed, out, commit_every=3, resume=True)
    assert str(err.value) == f"{journal}: not a feedline staging journal; start over without --resume"


def test_hdf5_resume_refuses_a_damaged_journal_line_naming_the_journal(mixed, tmp_path, monkeypatch):
    out = str(tmp_path / "o.h5")
    interrupted(mixed, out, monkeypatch)
    journal = out + ".partial.journal"
    with open(journal, "ab") as fh:
        fh.write(b'{"chunk": 3, "consumed": \n')   # a whole line, not a torn one
    with pytest.raises(PackError, match=r"the resume journal is damaged .*; start over without --resume") as err:
        pack(mixed, out, commit_every=3, resume=True)
    assert str(err.value).startswith(f"{journal}: the resume journal is damaged (")


def test_hdf5_resume_refuses_staged_bytes_that_were_lost(mixed, tmp_path, monkeypatch):
    import json
    out = str(tmp_path / "o.h5")
    interrupted(mixed, out, monkeypatch)
    journal, staging = out + ".partial.journal", out + ".partial.images"
    header, *entries = [json.loads(line) for line in open(journal, "rb").read().splitlines()]
    needed = sum(sum(e["lengths"]) for e in entries)
    assert os.path.getsize(staging) == header["staged_at"] + needed   # exactly what was committed
    os.truncate(staging, header["staged_at"] + needed - 10)
    with pytest.raises(PackError) as err:
        pack(mixed, out, commit_every=3, resume=True)
    assert str(err.value) == (f"{staging}: {needed - 10} staged bytes but the journal needs {needed}; "
                              "start over without --resume")


# -- LMDB: what a resume finds in OUT.partial -------------------------------------------------------

def put(partial: str, key: bytes, value: bytes) -> None:
    import lmdb
    env = lmdb.open(partial, subdir=False, lock=False)
    try:
        with env.begin(write=True) as txn:
            txn.put(key, value)
    finally:
        env.close()


def test_lmdb_resume_refuses_a_damaged_journal_entry_naming_the_file(mixed, tmp_path, monkeypatch):
    from feedline.format import journal_key
    out = str(tmp_path / "o.lmdb")
    interrupted(mixed, out, monkeypatch)
    put(out + ".partial", journal_key(1), b"{not json")
    with pytest.raises(PackError) as err:
        pack(mixed, out, commit_every=3, resume=True)
    assert str(err.value).startswith(f"{out}.partial: the resume journal is damaged (")
    assert str(err.value).endswith("); start over without --resume")


def test_lmdb_resume_refuses_images_the_journal_does_not_list(mixed, tmp_path, monkeypatch):
    from feedline.format import image_key
    out = str(tmp_path / "o.lmdb")
    interrupted(mixed, out, monkeypatch)   # 9 files committed: 8 records, 1 skipped
    put(out + ".partial", image_key(8), b"\xff\xd8 a record added after the last commit")
    with pytest.raises(PackError) as err:
        pack(mixed, out, commit_every=3, resume=True)
    assert str(err.value) == (f"{out}.partial: 9 images but the journal lists 8; "
                              "start over without --resume")


def test_lmdb_a_finished_unrenamed_pack_is_packed_again_and_says_so(mixed, tmp_path, monkeypatch, caplog):
    import converters.packer as packer
    out = str(tmp_path / "o.lmdb")

    def no_rename(a, b):
        raise KeyboardInterrupt
    with monkeypatch.context() as m:
        m.setattr(packer.os, "replace", no_rename)
        with pytest.raises(KeyboardInterrupt):
            pack(mixed, out, commit_every=3)
    caplog.clear()
    report = pack(mixed, out, commit_every=3, resume=True)
    said = [r.getMessage() for r in caplog.records if r.name.startswith("converters")]
    assert said == [f"{out}.partial: a finished but unrenamed pack; packing again"]
    assert report.resumed_from == 0 and report.packed == 13
    assert records_of(out) == records_of(pack(mixed, str(tmp_path / "whole.lmdb")).out)


def test_lmdb_resume_refuses_a_partial_that_is_not_lmdb(mixed, tmp_path):
    out = str(tmp_path / "o.lmdb")
    with open(out + ".partial", "wb") as fh:
        fh.write(b"not an LMDB file" * 1000)
    with pytest.raises(PackError) as err:
        pack(mixed, out, resume=True)
    assert str(err.value).startswith(f"{out}.partial: cannot open as LMDB (")
    assert str(err.value).endswith("); start over without --resume")


# -- the files a pack leaves ---------------------------------------------------------------------

def open_files() -> set[str]:
    fds = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return fds


@pytest.mark.parametrize("ext", ["lmdb", "h5"])
def test_a_pack_finished_or_interrupted_leaves_no_file_open(mixed, tmp_path, monkeypatch, ext):
    before = open_files()
    out = str(tmp_path / f"o.{ext}")
    interrupted(mixed, out, monkeypatch)   # interrupted_h5 works for either format
    assert not {f for f in open_files() - before if f.startswith(str(tmp_path))}
    pack(mixed, out, commit_every=3, resume=True)
    assert not {f for f in open_files() - before if f.startswith(str(tmp_path))}


def test_hdf5_offsets_are_int64_as_the_format_says(mixed, tmp_path):
    import h5py
    out = str(tmp_path / "o.h5")
    pack(mixed, out)
    with h5py.File(out, "r") as fh:
        assert fh["offsets"].dtype == np.dtype("<i8") and fh["offsets"][0] == 0


def test_hdf5_staged_bytes_changed_under_the_pack_are_refused_at_the_end(mixed, tmp_path, monkeypatch):
    import converters.packer as packer
    from feedline.scan import scan_folder
    out = str(tmp_path / "o.h5")
    whole = pack(mixed, str(tmp_path / "whole.h5"))
    real, last = packer.check_file, scan_folder(mixed).paths[-1]

    def meddling(root, rel, options):   # another process appends to the staging file
        if rel == last:
            with open(out + ".partial.images", "ab") as fh:
                fh.write(b"x" * 7)
        return real(root, rel, options)
    monkeypatch.setattr(packer, "check_file", meddling)
    with pytest.raises(PackError) as err:
        pack(mixed, out)
    assert str(err.value) == (f"{out}.partial.images: {whole.bytes_out + 7} staged bytes, expected "
                              f"{whole.bytes_out}; start over without --resume")
