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
SMALL_DISK = ("12m", "64m")   # conftest's small_disk: room for the staged images, not for a copy of them too


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
    make_photo_folder(str(tmp_path / "src"), n=64, classes=2, seed=3, sizes=[(320, 240)])
    screen = Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    pack(str(tmp_path / "src"), str(tmp_path / "o.lmdb"), jobs=1)
    last = screen.getvalue().split("\r")[-1]
    assert re.search(r"64/64 \[.*, (\d+\.\d) MiB/s\]", last), last   # the rate: every 64 files
    # Its value depends on the clock; bounds that no clock reading can break: some bytes were read,
    # and not at a TiB per second.
    assert 0 < float(re.search(r"(\d+\.\d) MiB/s", last).group(1)) < 2**20


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


def test_hdf5_stages_records_as_they_come_not_at_the_commit(big, tmp_path, monkeypatch):
    """A chunk's records are written to the staging file once they hold a MiB, so their memory
    is freed: by the seventh file of one chunk (1 MB each), megabytes are staged before any commit."""
    import converters.packer as packer
    from feedline.scan import scan_folder
    out = str(tmp_path / "o.h5")
    real, last, staged = packer.check_file, scan_folder(big).paths[-1], []

    def watching(root, rel, options):
        if rel == last:
            staged.append(os.path.getsize(out + ".partial.images"))
        return real(root, rel, options)
    monkeypatch.setattr(packer, "check_file", watching)
    pack(big, out, jobs=1)   # one chunk: 7 files, 8 MiB, under commit_every and commit_bytes
    assert staged and staged[0] >= 8192 + MiB
    assert stored_as_sources(out, big) == 7


def test_hdf5_disk_full_while_copying_into_the_container_keeps_the_staging(big, small_disk, images_elsewhere):
    out = str(small_disk.path / "o.h5")
    with pytest.raises(PackError) as err:
        pack(big, out, space_check=False)
    assert str(err.value).startswith(f"{out}.partial: the disk is full (No space left on device; ")
    assert sorted(os.listdir(small_disk.path)) == ["o.h5.partial.images", "o.h5.partial.journal"]
    small_disk.grow()
    report = pack(big, out, resume=True)
    assert report.resumed_from == 7 and stored_as_sources(out, big) == 7


def rewrite_journal_line(out: str, k: int, change) -> None:
    """Replace the k-th commit's line of an HDF5 staging journal by ``change(entry dict)`` (bytes)."""
    import json
    journal = out + ".partial.journal"
    lines = open(journal, "rb").read().splitlines(keepends=True)
    lines[k] = change(json.loads(lines[k])) + b"\n"
    with open(journal, "wb") as fh:
        fh.write(b"".join(lines))


@pytest.mark.parametrize("change, says", [
    (lambda e: json_bytes({**e, "version": 1}),
     "journal version 1, but this feedline resumes only version 2; start over without --resume"),
    (lambda e: json_bytes({**e, "bogus": 1}), "the resume journal is damaged ("),   # a TypeError
    (lambda e: b"[1, 2]", "the resume journal is damaged ("),                        # a TypeError too
    (lambda e: b"\xff\xfe{", "the resume journal is damaged ("),                    # a UnicodeDecodeError
])
def test_hdf5_resume_refuses_a_journal_entry_of_another_version_or_shape(mixed, tmp_path, monkeypatch, change, says):
    out = str(tmp_path / "o.h5")
    interrupted(mixed, out, monkeypatch)
    rewrite_journal_line(out, 2, change)
    with pytest.raises(PackError) as err:
        pack(mixed, out, commit_every=3, resume=True)
    assert str(err.value).startswith(f"{out}.partial.journal: {says}"), str(err.value)
    assert str(err.value).endswith("; start over without --resume")


def test_hdf5_resume_refuses_a_journal_with_a_gap(mixed, tmp_path, monkeypatch):
    out = str(tmp_path / "o.h5")
    interrupted(mixed, out, monkeypatch)
    rewrite_journal_line(out, 2, lambda e: json_bytes({**e, "chunk": 5}))
    with pytest.raises(PackError) as err:
        pack(mixed, out, commit_every=3, resume=True)
    assert str(err.value) == f"{out}.partial: the resume journal has a gap at chunk 1; start over without --resume"
    rewrite_journal_line(out, 2, lambda e: json_bytes({**e, "chunk": 1, "first_record": e["first_record"] + 1}))
    with pytest.raises(PackError, match="has a gap at chunk 1"):
        pack(mixed, out, commit_every=3, resume=True)


def json_bytes(value) -> bytes:
    import json
    return json.dumps(value).encode()


def test_hdf5_a_journal_line_that_cannot_be_written_names_the_journal_and_resume_finishes(
        mixed, tmp_path, monkeypatch):
    """ENOSPC half-way through the second commit's journal line (its images were written): the
    error names the journal, the torn line is cut on resume, and the chunk is packed again."""
    import errno

    import converters.hdf5_writer as hw
    real, lines = hw._write_all, []

    def write_all(fd, buffers):
        if len(buffers) == 1 and bytes(buffers[0]).startswith(b'{"chunk"'):
            lines.append(buffers[0])
            if len(lines) == 2:
                real(fd, [buffers[0][:20]])
                raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, buffers)
    out = str(tmp_path / "o.h5")
    with monkeypatch.context() as m:
        m.setattr(hw, "_write_all", write_all)
        with pytest.raises(PackError) as err:
            pack(mixed, out, commit_every=3, jobs=1)
    assert str(err.value).startswith(f"{out}.partial.journal: the disk is full (No space left on device")
    report = pack(mixed, out, commit_every=3, resume=True)
    assert report.resumed_from == 3
    assert records_of(out) == records_of(pack(mixed, str(tmp_path / "whole.h5")).out)


# -- the packer: what a pack writes, reports and keeps --------------------------------------------

def source_size(src: str, rel: str) -> int:
    return os.path.getsize(os.path.join(src, rel))


def test_a_pack_reports_what_it_read_and_wrote_and_stamps_its_metadata(mixed, tmp_path, monkeypatch):
    import datetime
    import time

    from converters import PackOptions
    from feedline import __version__
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TZ", "Asia/Tokyo")   # the stamp is UTC whatever the machine's zone
    time.tzset()
    t0 = time.perf_counter()
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    try:   # a relative OUT, in a folder that does not exist yet; several commits
        report = pack(mixed, "rel/o.lmdb", jobs=1, commit_every=3)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    after = datetime.datetime.now(datetime.timezone.utc)
    took = time.perf_counter() - t0
    out = str(tmp_path / "rel" / "o.lmdb")
    assert (report.out, report.error_report, report.format) == (out, out + ".errors.csv", "lmdb")
    assert 0 < report.seconds <= took
    with feedline.open_dataset(out) as ds:
        paths = [ds.path(i) for i in range(len(ds))]
        meta = dict(ds.meta)
    assert report.bytes_in == sum(source_size(mixed, p) for p in paths)
    assert report.bytes_out == sum(len(r) for r in records_of(out))
    assert before <= datetime.datetime.fromisoformat(meta.pop("created")) <= after
    from converters.journal import scan_digest
    from feedline.scan import scan_folder
    assert meta.pop("input_digest") == scan_digest(scan_folder(mixed))
    assert meta == {"format": "feedline", "format_version": 2, "checksum": "xxh3_64", "count": 13,
                    "classes": ["class_000", "class_001"], "source": mixed, "feedline_version": __version__,
                    "pack_options": PackOptions().output_options(feedline_format("lmdb"))}


def feedline_format(ext: str):
    from converters import OutputFormat
    return OutputFormat({"h5": "hdf5"}.get(ext, ext))


def test_a_shuffled_pack_holds_the_records_in_the_seeds_order(mixed, tmp_path):
    from feedline.scan import scan_folder, shuffled
    out = str(tmp_path / "s.h5")
    pack(mixed, out, shuffle=3)
    order = [p for p in shuffled(scan_folder(mixed), 3).paths if p not in ("class_000/empty.jpg", "class_001/text.png")]
    with feedline.open_dataset(out) as ds:
        assert [ds.path(i) for i in range(len(ds))] == order != sorted(order)
        assert ds.meta["pack_options"]["shuffle"] == 3


def test_commit_bytes_ends_a_chunk_before_commit_every(big, tmp_path, monkeypatch):
    from pack_helpers import committed
    out = str(tmp_path / "o.lmdb")
    with monkeypatch.context() as m:
        interrupt_at(m, big, 6)
        with pytest.raises(KeyboardInterrupt):
            pack(big, out, commit_bytes=3_000_000, jobs=1)   # 1 MB files: a commit once 3 reach it
    assert committed(out) == 3
    out = str(tmp_path / "p.lmdb")
    with monkeypatch.context() as m:
        interrupt_at(m, big, 6)
        with pytest.raises(KeyboardInterrupt):
            pack(big, out, commit_bytes=2_000_001, jobs=1)   # 2 files fall one byte short
    assert committed(out) == 3


def test_the_journal_of_an_interrupted_pack_lists_each_chunk(mixed, tmp_path, monkeypatch):
    """Read straight from the staging journal: chunk numbers, files consumed, first records,
    the options and input digest, and per record its label, size, path, length and checksum."""
    import json

    from converters import PackOptions
    from converters.journal import scan_digest
    from feedline.format import checksum
    from feedline.scan import scan_folder
    out = str(tmp_path / "o.h5")
    interrupted(mixed, out, monkeypatch)
    _, *entries = [json.loads(line) for line in open(out + ".partial.journal", "rb").read().splitlines()]
    scan = scan_folder(mixed)
    assert [(e["chunk"], e["consumed"], e["first_record"]) for e in entries] == [(0, 3, 0), (1, 6, 2), (2, 9, 5)]
    assert entries[0]["skipped"] == [["class_000/empty.jpg", "empty", "zero-byte file"]]
    with feedline.open_dataset(pack(mixed, str(tmp_path / "whole.h5")).out) as ds:   # what the records become
        final = {ds.path(i): (ds.label(i), list(ds.size(i)), bytes(ds.read(i))) for i in range(len(ds))}
    converted = {"class_001/cmyk.jpg", "class_001/rgba.png", "class_001/rotated.jpg"}
    for e in entries:
        assert e["options"] == PackOptions(commit_every=3).output_options(feedline_format("h5"))
        assert e["digest"] == scan_digest(scan) and e["version"] == 2
        assert e["paths"] == [p for p in scan.paths[e["consumed"] - 3:e["consumed"]] if p in final]
        for label, size, path, length, sums in zip(e["labels"], e["sizes"], e["paths"], e["lengths"], e["checksums"]):
            data = final[path][2]
            assert (label, size, length, sums) == (final[path][0], final[path][1], len(data), checksum(data))
            assert label == scan.labels[scan.paths.index(path)]
        assert e["converted"] == len(converted & set(e["paths"]))
        assert e["source_bytes"] == sum(source_size(mixed, p) for p in e["paths"])


def test_a_pack_interrupted_twice_resumes_twice_to_the_same_data_set(mixed, tmp_path, monkeypatch):
    out = str(tmp_path / "o.lmdb")
    interrupted(mixed, out, monkeypatch, k=5)
    with monkeypatch.context() as m:
        interrupt_at(m, mixed, 12)
        with pytest.raises(KeyboardInterrupt):
            pack(mixed, out, commit_every=3, jobs=1, resume=True)
    report = pack(mixed, out, commit_every=3, resume=True)
    assert report.resumed_from == 9
    whole = pack(mixed, str(tmp_path / "whole.lmdb"), commit_every=3)
    assert records_of(out) == records_of(whole.out) and report_fields(report) == report_fields(whole)


def test_the_progress_bar_of_a_resumed_pack_starts_where_it_stopped(mixed, tmp_path, monkeypatch):
    out = str(tmp_path / "o.lmdb")
    interrupted(mixed, out, monkeypatch)
    screen = Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    pack(mixed, out, commit_every=3, resume=True)
    assert screen.getvalue().split("\r")[-1].startswith("pack: 100%") and "15/15" in screen.getvalue()
    assert " 9/15" in screen.getvalue()
    quiet = Terminal()
    monkeypatch.setattr(sys, "stderr", quiet)
    pack(mixed, str(tmp_path / "q.lmdb"), progress=False)
    assert quiet.getvalue() == ""


def test_where_out_cannot_be_written_is_said_before_the_source_is_read(mixed, tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(PackError) as err:
        pack(str(tmp_path / "no-such-src"), str(tmp_path / "file" / "sub" / "o.lmdb"))
    assert str(err.value) == (f"{tmp_path / 'file' / 'sub'}: cannot create the output folder "
                              f"({tmp_path / 'file'} is a file, not a folder); choose a writable place for OUT")
    with pytest.raises(PackError) as err:
        pack(str(tmp_path / "no-such-src"), str(tmp_path), format="lmdb")
    assert str(err.value) == f"{tmp_path} is a folder; name an output file such as OUT.lmdb or OUT.h5"
    with pytest.raises(PackError, match="cannot tell the format from the extension"):
        pack(str(tmp_path / "no-such-src"), str(tmp_path / "o.txt"))
    os.symlink(tmp_path / "nowhere", tmp_path / "link.lmdb")
    with pytest.raises(PackError, match="already exists"):
        pack(str(tmp_path / "no-such-src"), str(tmp_path / "link.lmdb"))
    with pytest.raises(PackError) as err:
        pack(str(tmp_path / "no-such-src"), str(tmp_path / "file"), format="lmdb")
    assert str(err.value) == (f"{tmp_path / 'file'} already exists; pass --overwrite to replace it "
                              "(the old file stays until the new one is complete)")


def test_on_error_fail_names_the_file_the_reason_and_that_nothing_was_written(mixed, tmp_path):
    out = str(tmp_path / "o.h5")
    with pytest.raises(PackError) as err:
        pack(mixed, out, on_error="fail", commit_every=3)
    assert str(err.value) == (f"{os.path.join(mixed, 'class_000/empty.jpg')}: empty: zero-byte file "
                              f"(--on-error fail: stopped; nothing written at {out})")
    assert os.listdir(tmp_path) == []


def test_resume_is_refused_when_the_labels_csv_renamed_a_class_or_relabelled_a_file(mixed, tmp_path, monkeypatch):
    """The same files under other class names, or one file under another class, is another data
    set: the journal's input digest covers the class names and every file's label."""
    from feedline.scan import scan_folder
    photos = [p for p in scan_folder(mixed).paths if "/img_" in p]
    csv = tmp_path / "labels.csv"

    def write(names, relabel=None):
        csv.write_text("path,label\n" + "".join(
            f"{p},{names[(i + (p == relabel)) % 2]}\n" for i, p in enumerate(photos)))
    write(["cat", "dog"])
    out = str(tmp_path / "o.lmdb")
    with monkeypatch.context() as m:
        interrupt_at(m, mixed, scan_folder(mixed).paths.index(photos[5]) + 1)   # after 2 commits
        with pytest.raises(KeyboardInterrupt):
            pack(mixed, out, labels_csv=str(csv), commit_every=2, jobs=1)
    for names, relabel in ((["lion", "wolf"], None), (["cat", "dog"], photos[-1])):
        write(names, relabel)
        with pytest.raises(PackError) as err:
            pack(mixed, out, labels_csv=str(csv), commit_every=2, resume=True)
        assert str(err.value) == (f"{out}.partial: the source folder changed since the interrupted pack "
                                  "(files or labels differ); start over without --resume")
    write(["cat", "dog"])
    report = pack(mixed, out, labels_csv=str(csv), commit_every=2, resume=True)
    whole = pack(mixed, str(tmp_path / "whole.lmdb"), labels_csv=str(csv), commit_every=2)
    assert report.resumed_from == 4 and records_of(out) == records_of(whole.out)
    assert (whole.found, whole.packed, whole.skipped_by_reason) == (15, 10, {"not-in-labels-csv": 5})
    assert report_fields(report) == report_fields(whole)



def test_hdf5_stages_more_records_than_one_writev_takes(tmp_path):
    """1,050 small records staged at one commit: more buffers than the kernel's IOV_MAX (1,024)."""
    ok, tiny = cv2.imencode(".jpg", np.full((8, 8, 3), 200, np.uint8))
    (tmp_path / "src" / "c").mkdir(parents=True)
    for k in range(1050):
        (tmp_path / "src" / "c" / f"{k:04d}.jpg").write_bytes(tiny.tobytes())
    out = str(tmp_path / "o.h5")
    pack(str(tmp_path / "src"), out, commit_every=2000, jobs=1)
    assert stored_as_sources(out, str(tmp_path / "src")) == 1050


def test_a_leftover_unfinished_pack_is_named_when_discarded(mixed, tmp_path, monkeypatch, caplog):
    for ext, first in (("lmdb", ".partial"), ("h5", ".partial.images")):
        out = str(tmp_path / f"o.{ext}")
        interrupted(mixed, out, monkeypatch)
        caplog.clear()
        pack(mixed, out)
        said = [r.getMessage() for r in caplog.records if r.name == "converters.packer"]
        assert said == [f"{out}{first}: discarding an unfinished pack (pass --resume to continue it)"]


def test_resume_refused_for_room_keeps_what_is_committed(big, small_disk, tmp_path, monkeypatch):
    from feedline.errors import DiskFullError
    out = str(small_disk.path / "o.lmdb")
    with monkeypatch.context() as m:
        interrupt_at(m, big, 4)
        with pytest.raises(KeyboardInterrupt):
            pack(big, out, commit_every=3, jobs=1)
    (small_disk.path / "ballast").write_bytes(b"\0" * (8 << 20))   # the rest no longer fits
    with pytest.raises(DiskFullError):
        pack(big, out, commit_every=3, resume=True)
    assert sorted(os.listdir(small_disk.path)) == ["ballast", "o.lmdb.partial"]   # kept for a later resume
    os.remove(small_disk.path / "ballast")
    assert pack(big, out, commit_every=3, resume=True).resumed_from == 3
    assert stored_as_sources(out, big) == 7


def test_out_made_a_folder_during_the_pack_is_a_write_failure_and_resume_finishes(mixed, tmp_path, monkeypatch):
    import converters.packer as packer
    from feedline.scan import scan_folder
    out = str(tmp_path / "o.lmdb")
    real, last = packer.check_file, scan_folder(mixed).paths[-1]

    def racing(root, rel, options):   # another process makes OUT a folder meanwhile
        if rel == last:
            os.mkdir(out)
        return real(root, rel, options)
    with monkeypatch.context() as m:
        m.setattr(packer, "check_file", racing)
        with pytest.raises(PackError) as err:
            pack(mixed, out, commit_every=3)
    assert str(err.value) == (f"{out}: write failed (Is a directory); what is committed is intact: "
                              "fix the cause and rerun with --resume")
    os.rmdir(out)
    assert pack(mixed, out, commit_every=3, resume=True).packed == 13


def test_resume_with_other_options_lists_every_difference(mixed, tmp_path, monkeypatch):
    out = str(tmp_path / "o.h5")
    interrupted(mixed, out, monkeypatch)
    with pytest.raises(PackError) as err:
        pack(mixed, out, commit_every=3, quality=80, max_side=64, resume=True)
    assert str(err.value) == (f"{out}.partial: the interrupted pack used other options (max_side: None then, 64 now, "
                              "quality: 95 then, 80 now); rerun with the same options, or start over with "
                              "--overwrite and no --resume")


def test_lmdb_resume_reopens_the_map_with_room_to_grow(tmp_path, monkeypatch, caplog):
    """A resumed LMDB pack maps twice its partial file: the rest (smaller than what is
    committed) goes in without the map filling, that is without packing a chunk twice."""
    import converters.lmdb_writer as lw
    src = tmp_path / "src"
    for k in range(6):
        noise_jpeg(src / "c" / f"{k}.jpg", 560, seed=k, size=300_000)
    monkeypatch.setattr(lw, "INITIAL_MAP_SIZE", 64 << 10)
    out = str(tmp_path / "o.lmdb")
    with monkeypatch.context() as m:
        interrupt_at(m, str(src), 5)
        with pytest.raises(KeyboardInterrupt):
            pack(str(src), out, commit_every=2, jobs=1)
    caplog.set_level(logging.DEBUG, logger="converters")
    caplog.clear()
    assert pack(str(src), out, commit_every=2, resume=True).resumed_from == 4
    assert growth(caplog, out) == [] and redone(caplog) == []
    assert stored_as_sources(out, str(src)) == 6


def test_each_skipped_file_is_logged_with_its_reason(mixed, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="converters.packer")
    pack(mixed, str(tmp_path / "o.lmdb"))
    said = [r.getMessage() for r in caplog.records if r.name == "converters.packer"]
    assert "skipped class_000/empty.jpg: empty: zero-byte file" in said
    assert [m for m in said if m.startswith("skipped ")][1].startswith("skipped class_001/text.png: not-an-image: ")
