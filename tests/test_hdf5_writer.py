"""The HDF5 writer: images staged where HDF5 puts them (written once), copied into the container
when they land elsewhere (in the kernel, or through a buffer), staged as they come, checked at
the end, and a disk that fills while copying or writing the journal. Every record's bytes are
checked against its source file, not against another pack made by the same code."""
from __future__ import annotations

import logging
import os

import cv2
import h5py
import numpy as np
import pytest
from pack_helpers import MiB, big, mixed, records_of, stored_as_sources

from converters import pack
from feedline.core.errors import PackError


SMALL_DISK = ("12m", "64m")   # conftest's small_disk: room for the staged images, not for a copy of them too


@pytest.fixture
def images_elsewhere(monkeypatch):
    """Staged bytes at 8192, where HDF5 puts the images dataset at 2048: finish copies them."""
    import converters.hdf5_writer as hw
    monkeypatch.setattr(hw, "images_offset", lambda: 8192)


def test_hdf5_copies_the_images_in_the_kernel_byte_for_byte(big, tmp_path, images_elsewhere, caplog):
    caplog.set_level(logging.DEBUG, logger="converters")
    out = str(tmp_path / "k.h5")
    pack(big, out)
    assert stored_as_sources(out, big) == 7
    said = [r.getMessage() for r in caplog.records if r.name.startswith("converters.")]
    assert said == ["HDF5 put the images at 2048, not 8192: copying them"]   # no buffer copy


def test_hdf5_copies_through_a_buffer_where_the_kernel_cannot(big, tmp_path, images_elsewhere, monkeypatch, caplog):
    import errno

    import converters.hdf5_writer as hw

    def cross_device(*args):
        raise OSError(errno.EXDEV, "Invalid cross-device link")
    monkeypatch.setattr(hw.os, "copy_file_range", cross_device)
    caplog.set_level(logging.DEBUG, logger="converters")
    out = str(tmp_path / "b.h5")
    pack(big, out)
    assert stored_as_sources(out, big) == 7
    said = [r.getMessage() for r in caplog.records if r.name.startswith("converters.")]
    assert said[-1] == ("copy_file_range unavailable ([Errno 18] Invalid cross-device link); "
                        "copying through a buffer")


def test_hdf5_stages_the_images_where_hdf5_puts_them_and_writes_them_once(mixed, tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)   # asking HDF5 where it puts them leaves no file behind
    caplog.set_level(logging.DEBUG, logger="converters")
    pack(mixed, "o.h5")
    assert not [r for r in caplog.records if r.name == "converters.hdf5_writer"]   # no copy
    assert sorted(os.listdir(tmp_path)) == ["o.h5", "o.h5.errors.csv"]


def test_hdf5_offsets_are_int64_as_the_format_says(mixed, tmp_path):
    import h5py
    out = str(tmp_path / "o.h5")
    pack(mixed, out)
    with h5py.File(out, "r") as fh:
        assert fh["offsets"].dtype == np.dtype("<i8") and fh["offsets"][0] == 0


def test_hdf5_staged_bytes_changed_under_the_pack_are_refused_at_the_end(mixed, tmp_path, monkeypatch):
    import converters.packer as packer
    from feedline.dataset.scan import scan_folder
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
    from feedline.dataset.scan import scan_folder
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


def test_hdf5_a_journal_line_that_cannot_be_written_names_the_journal_and_resume_finishes(
        mixed, tmp_path, monkeypatch):
    """ENOSPC half-way through the second commit's journal line (its images were written): the
    error names the journal, the torn line is cut on resume, and the chunk is packed again."""
    import errno

    import converters.hdf5_writer as hw
    real, lines = hw.write_all, []

    def write_all(fd, buffers):
        if len(buffers) == 1 and bytes(buffers[0]).startswith(b'{"chunk"'):
            lines.append(buffers[0])
            if len(lines) == 2:
                real(fd, [buffers[0][:20]])
                raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, buffers)
    out = str(tmp_path / "o.h5")
    with monkeypatch.context() as m:
        m.setattr(hw, "write_all", write_all)
        with pytest.raises(PackError) as err:
            pack(mixed, out, commit_every=3, jobs=1)
    assert str(err.value).startswith(f"{out}.partial.journal: the disk is full (No space left on device")
    report = pack(mixed, out, commit_every=3, resume=True)
    assert report.resumed_from == 3
    assert records_of(out) == records_of(pack(mixed, str(tmp_path / "whole.h5")).out)


def test_hdf5_stages_more_records_than_one_writev_takes(tmp_path):
    """1,050 small records staged at one commit: more buffers than the kernel's IOV_MAX (1,024)."""
    ok, tiny = cv2.imencode(".jpg", np.full((8, 8, 3), 200, np.uint8))
    (tmp_path / "src" / "c").mkdir(parents=True)
    for k in range(1050):
        (tmp_path / "src" / "c" / f"{k:04d}.jpg").write_bytes(tiny.tobytes())
    out = str(tmp_path / "o.h5")
    pack(str(tmp_path / "src"), out, commit_every=2000, jobs=1)
    assert stored_as_sources(out, str(tmp_path / "src")) == 1050


PACK_IN_A_PROCESS = "import sys\nfrom converters import pack\npack(sys.argv[1], sys.argv[2])\n"


def test_a_second_pack_to_the_same_hdf5_output_refuses_at_once_naming_the_first(tmp_path):
    """The first pack is stopped (SIGSTOP) while it holds the output: the second names it and
    touches nothing of it; the first, continued, finishes a whole, readable file."""
    import signal
    import subprocess
    import sys
    import time

    from feedline import open_dataset
    from feedline.sample import make_photo_folder
    src, out = str(tmp_path / "src"), str(tmp_path / "out.h5")
    make_photo_folder(src, n=150, classes=2, seed=3)
    first = subprocess.Popen([sys.executable, "-c", PACK_IN_A_PROCESS, src, out])
    lock = out + ".partial.lock"
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(out + ".partial.journal"):   # the first pack is writing
            assert first.poll() is None and time.monotonic() < deadline, "the first pack never began writing"
            time.sleep(0.002)
        first.send_signal(signal.SIGSTOP)
        staged = {p: os.path.getsize(p) for p in (out + ".partial.images", out + ".partial.journal")}
        with pytest.raises(PackError) as info:
            pack(src, out)
        text = str(info.value)
        assert text.startswith(f"{out}: another pack is writing it (pid {first.pid} on ") and "\n" not in text
        assert text.endswith("wait for it to finish or stop it, then pack again")
        assert {p: os.path.getsize(p) for p in staged} == staged and not os.path.exists(out)
    finally:
        first.send_signal(signal.SIGCONT)
        assert first.wait(120) == 0
    with open_dataset(out) as store:
        assert len(store) == 150 and all(store.read_checked(i) is not None for i in range(150))
    assert not os.path.exists(lock)
    pack(src, out, overwrite=True)   # and the next pack goes ahead
