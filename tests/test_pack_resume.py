"""Interrupted packs: nothing valid at OUT, and --resume gives what an uninterrupted pack gives."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time

import pytest

from pack_helpers import committed, mixed_folder, snapshot

import feedline
from converters import pack
from feedline.core.errors import PackError, StoreError
from feedline.dataset.scan import scan_folder

FORMATS = ["lmdb", "h5"]


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> str:
    """Photos in two classes plus a few converted and a few bad files: the journal
    must carry records, conversions and skips alike."""
    return mixed_folder(tmp_path_factory.mktemp("resume") / "src", n=14, seed=5, converted="class_000",
                        bad=("class_001", "class_001"))


@pytest.fixture(scope="module")
def reference(src, tmp_path_factory):
    """The uninterrupted packs, one per format."""
    folder = tmp_path_factory.mktemp("reference")
    return {ext: snapshot(_pack_ok(src, str(folder / f"ref.{ext}"))) for ext in FORMATS}


def _pack_ok(src: str, out: str, **kw) -> str:
    pack(src, out, **kw)
    return out


def interrupt_after(monkeypatch, k: int) -> None:
    """Reading the k-th file (in scan order) raises KeyboardInterrupt, as Ctrl-C would."""
    import converters.packer as packer
    real = packer.check_file

    def flaky(root, rel, options):
        if rel == scan_folder(root).paths[k - 1]:
            raise KeyboardInterrupt
        return real(root, rel, options)

    monkeypatch.setattr(packer, "check_file", flaky)


def names_in(folder) -> list[str]:
    return sorted(os.listdir(folder))


def resume_reading(monkeypatch, src: str, out: str, **kw):
    """``pack(..., resume=True)``, recording which files it reads (the real check_file,
    wrapped): a resumed pack reads only the files after its last commit."""
    import converters.packer as packer
    real, read = packer.check_file, []

    def recording(root, rel, options):
        read.append(rel)
        return real(root, rel, options)

    with monkeypatch.context() as m:
        m.setattr(packer, "check_file", recording)
        report = pack(src, out, resume=True, **kw)
    return report, read


def assert_really_resumed(report, read: list[str], src: str, done: int) -> None:
    """Resumed from the journal's last commit, and nothing before it read again."""
    paths = scan_folder(src).paths
    assert report.resumed_from == done
    assert read == paths[done:]


@pytest.mark.parametrize("ext", FORMATS)
@pytest.mark.parametrize("k", [1, 6, 19])
@pytest.mark.parametrize("jobs", [1, 2])
def test_interrupt_then_resume_is_identical(src, reference, tmp_path, monkeypatch, ext, k, jobs):
    out = str(tmp_path / f"o.{ext}")
    with monkeypatch.context() as m:
        interrupt_after(m, k)
        with pytest.raises(KeyboardInterrupt):
            pack(src, out, commit_every=4, jobs=jobs)
    assert not os.path.exists(out) and not os.path.exists(out + ".errors.csv")
    done = committed(out)
    # Commits every 4 files. One thread reads file k after committing what precedes it;
    # with a pool, reading runs ahead of the conversions, so fewer may be committed.
    assert done % 4 == 0 and done <= (k - 1) // 4 * 4
    if jobs == 1:
        assert done == (k - 1) // 4 * 4
    report, read = resume_reading(monkeypatch, src, out, commit_every=4, jobs=jobs)
    assert_really_resumed(report, read, src, done)
    assert snapshot(out) == reference[ext]
    assert names_in(tmp_path) == sorted([f"o.{ext}", f"o.{ext}.errors.csv"])
    assert report.packed + len(report.skipped) == report.found == 19


@pytest.mark.parametrize("ext", FORMATS)
def test_nothing_valid_at_out_after_an_interrupt(src, tmp_path, monkeypatch, ext):
    out = str(tmp_path / f"o.{ext}")
    interrupt_after(monkeypatch, 9)
    with pytest.raises(KeyboardInterrupt):
        pack(src, out, commit_every=3, jobs=1)
    assert not os.path.exists(out)
    if ext == "lmdb":
        with pytest.raises(StoreError, match="--resume"):
            feedline.open_dataset(out + ".partial")
    else:
        assert names_in(tmp_path) == ["o.h5.partial.images", "o.h5.partial.journal"]


@pytest.mark.parametrize("ext", FORMATS)
def test_resume_with_other_options_is_refused(src, tmp_path, monkeypatch, ext):
    out = str(tmp_path / f"o.{ext}")
    with monkeypatch.context() as m:
        interrupt_after(m, 10)
        with pytest.raises(KeyboardInterrupt):
            pack(src, out, commit_every=4, jobs=1)
    leftovers = names_in(tmp_path)
    with pytest.raises(PackError, match="quality: 95 then, 80 now"):
        pack(src, out, commit_every=4, quality=80, resume=True)
    with pytest.raises(PackError, match="check: 'headers' then, 'decode' now"):
        pack(src, out, commit_every=4, check="decode", resume=True)
    assert names_in(tmp_path) == leftovers and not os.path.exists(out)
    assert committed(out) == 8


@pytest.mark.parametrize("ext", FORMATS)
def test_resume_after_the_source_changed_is_refused(src, tmp_path, monkeypatch, ext):
    import shutil
    copy = shutil.copytree(src, str(tmp_path / "copy"))
    out = str(tmp_path / f"o.{ext}")
    with monkeypatch.context() as m:
        interrupt_after(m, 10)
        with pytest.raises(KeyboardInterrupt):
            pack(copy, out, commit_every=4, jobs=1)
    os.remove(os.path.join(copy, "class_000", "cmyk.jpg"))
    with pytest.raises(PackError, match="source folder changed"):
        pack(copy, out, commit_every=4, resume=True)


@pytest.mark.parametrize("ext", FORMATS)
def test_resume_with_nothing_to_resume_packs_from_the_start(src, reference, tmp_path, monkeypatch, ext):
    out = str(tmp_path / f"o.{ext}")
    report, read = resume_reading(monkeypatch, src, out)
    assert_really_resumed(report, read, src, 0)
    assert snapshot(out) == reference[ext]


@pytest.mark.parametrize("ext", FORMATS)
def test_without_resume_a_stale_partial_is_discarded(src, reference, tmp_path, monkeypatch, ext, caplog):
    out = str(tmp_path / f"o.{ext}")
    with monkeypatch.context() as m:
        interrupt_after(m, 10)
        with pytest.raises(KeyboardInterrupt):
            pack(src, out, commit_every=4, jobs=1)
    pack(src, out)
    assert "discarding an unfinished pack" in caplog.text
    assert snapshot(out) == reference[ext]
    assert names_in(tmp_path) == sorted([f"o.{ext}", f"o.{ext}.errors.csv"])


def test_hdf5_torn_journal_line_and_extra_bytes_are_cut(src, reference, tmp_path, monkeypatch):
    out = str(tmp_path / "o.h5")
    with monkeypatch.context() as m:
        interrupt_after(m, 10)
        with pytest.raises(KeyboardInterrupt):
            pack(src, out, commit_every=4, jobs=1)
    # A kill in the middle of a commit: bytes staged, its journal line half written.
    with open(out + ".partial.images", "ab") as fh:
        fh.write(b"\xff" * 5000)
    with open(out + ".partial.journal", "ab") as fh:
        fh.write(b'{"chunk": 2, "consu')
    report, read = resume_reading(monkeypatch, src, out, commit_every=4)
    assert_really_resumed(report, read, src, 8)
    assert snapshot(out) == reference["h5"]


def _fail_write_once(monkeypatch, ext: str) -> None:
    """The second commit fails with ENOSPC half-way through its images."""
    exc = OSError(errno.ENOSPC, "No space left on device")
    if ext == "lmdb":
        from converters.lmdb_writer import LmdbWriter
        real = LmdbWriter._write
        calls = {"n": 0}

        def write(self, fill, nbytes):
            calls["n"] += 1
            if calls["n"] != 2:
                return real(self, fill, nbytes)

            def half_then_fail(txn):
                txn.put(b"img/9999999999", b"x")
                raise exc
            return real(self, half_then_fail, nbytes)

        monkeypatch.setattr(LmdbWriter, "_write", write)
    else:
        import converters.hdf5_writer as hw
        real = hw.write_all
        calls = {"n": 0}

        def write_all(fd, buffers):
            calls["n"] += 1
            if calls["n"] == 3:  # the second chunk's images (1: images, 2: journal line, 3: images)
                real(fd, buffers[:len(buffers) // 2])
                raise exc
            real(fd, buffers)

        monkeypatch.setattr(hw, "write_all", write_all)


@pytest.mark.parametrize("ext", FORMATS)
def test_full_disk_says_where_and_resume_finishes(src, reference, tmp_path, monkeypatch, ext):
    out = str(tmp_path / f"o.{ext}")
    with monkeypatch.context() as m:
        _fail_write_once(m, ext)
        with pytest.raises(PackError, match="the disk is full .* rerun the same command with --resume") as err:
            pack(src, out, commit_every=4, jobs=1)
    assert os.path.basename(out) in str(err.value)
    assert not os.path.exists(out)
    assert committed(out) == 4  # the first commit; the second failed half-way and left nothing
    report, read = resume_reading(monkeypatch, src, out, commit_every=4)
    assert_really_resumed(report, read, src, 4)
    assert snapshot(out) == reference[ext]


@pytest.mark.parametrize("ext", FORMATS)
def test_interrupt_between_finish_and_rename(src, reference, tmp_path, monkeypatch, ext):
    import converters.packer as packer
    out = str(tmp_path / f"o.{ext}")

    def no_rename(a, b):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(packer.os, "replace", no_rename)
        with pytest.raises(KeyboardInterrupt):
            pack(src, out, commit_every=4, jobs=1)
    assert not os.path.exists(out)
    # By design, LMDB packs a finished but unrenamed file again (it cannot prove it was made
    # from this input); HDF5's staged bytes and journal are intact, so nothing is read again.
    report, read = resume_reading(monkeypatch, src, out, commit_every=4)
    assert_really_resumed(report, read, src, 0 if ext == "lmdb" else 19)
    assert snapshot(out) == reference[ext]


_SLOW_PACK = """
import sys, time
import converters.packer as packer
real = packer.check_file
def slow(root, rel, options):
    time.sleep(0.05)
    return real(root, rel, options)
packer.check_file = slow
from converters import pack
pack(sys.argv[1], sys.argv[2], commit_every=2, jobs=1)
"""


@pytest.mark.parametrize("ext", FORMATS)
def test_sigkill_then_resume_is_identical(src, reference, tmp_path, ext):
    out = str(tmp_path / f"o.{ext}")
    # The first commit grows the LMDB file past its two meta pages, or adds a line to the HDF5
    # journal after its header line (written at the start: not a commit).
    def first_commit_done() -> bool:
        if ext == "lmdb":
            return os.path.exists(out + ".partial") and os.path.getsize(out + ".partial") > 8192
        journal = out + ".partial.journal"
        return os.path.exists(journal) and open(journal, "rb").read().count(b"\n") >= 2
    import converters
    repo = os.path.dirname(os.path.dirname(os.path.abspath(converters.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_PACK, src, out], env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        if first_commit_done():
            time.sleep(0.3)  # a few commits in; at least 0.8 s of work is left
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert not os.path.exists(out)
    done = committed(out)
    assert 0 < done < 19
    report = pack(src, out, commit_every=2, resume=True)
    assert report.resumed_from == done
    assert snapshot(out) == reference[ext]


@pytest.mark.parametrize("ext", FORMATS)
def test_resume_of_a_complete_output_reports_it_and_exits_0(src, reference, tmp_path, monkeypatch, capsys, ext):
    """A resumed command run twice (a script, a retry) succeeds the second time without
    packing again; with other options or another input it is refused, OUT untouched."""
    import shutil

    from feedline.cli import main
    out = _pack_ok(src, str(tmp_path / f"o.{ext}"))
    before = open(out, "rb").read()
    report, read = resume_reading(monkeypatch, src, out)
    assert read == [] and report.already_complete and report.packed == 17 and len(report.skipped) == 2
    import logging
    handlers = logging.root.handlers[:]
    try:
        assert main(["pack", src, out, "--resume"]) == 0
    finally:  # main() configures logging onto this test's captured stderr
        logging.root.handlers[:] = handlers
    assert capsys.readouterr().out.strip() == (f"{out} is already complete: 17 records from the same input and "
                                                "options (2 skipped); nothing to do")
    with pytest.raises(PackError, match=r"complete but was packed with other options \(quality: 95 then, 80 now\)"):
        pack(src, out, quality=80, resume=True)
    copy = shutil.copytree(src, str(tmp_path / "copy"))
    os.remove(os.path.join(copy, "class_000", "cmyk.jpg"))
    with pytest.raises(PackError, match="complete but was packed from other input"):
        pack(copy, out, resume=True)
    assert open(out, "rb").read() == before and snapshot(out) == reference[ext]
