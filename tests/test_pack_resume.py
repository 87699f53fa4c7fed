"""Interrupted packs: nothing valid at OUT, and --resume gives what an uninterrupted pack gives."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time

import pytest

import feedline
import helpers_images as imgs
from converters import pack, read_error_report
from feedline.errors import PackError, StoreError
from feedline.scan import scan_folder

FORMATS = ["lmdb", "h5"]


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> str:
    """Photos in two classes plus a few converted and a few bad files: the journal
    must carry records, conversions and skips alike."""
    from feedline.sample import make_photo_folder
    root = tmp_path_factory.mktemp("resume") / "src"
    make_photo_folder(str(root), n=14, classes=2, seed=5, sizes=[(96, 64), (64, 96)])
    for name in ("rgba.png", "cmyk.jpg", "rotated.jpg"):
        imgs.GOOD_BUILDERS[name](str(root / "class_000" / name))
    (root / "class_001" / "empty.jpg").write_bytes(b"")
    (root / "class_001" / "text.png").write_text("hello")
    return str(root)


@pytest.fixture(scope="module")
def reference(src, tmp_path_factory):
    """The uninterrupted packs, one per format."""
    folder = tmp_path_factory.mktemp("reference")
    return {ext: snapshot(_pack_ok(src, str(folder / f"ref.{ext}"))) for ext in FORMATS}


def _pack_ok(src: str, out: str, **kw) -> str:
    pack(src, out, **kw)
    return out


def snapshot(out: str) -> dict:
    """Everything that must match: records, labels, sizes, paths, metadata but its time, error report."""
    with feedline.open_dataset(out) as ds:
        recs = [(bytes(ds.read(i)), ds.label(i), ds.size(i), ds.path(i)) for i in range(len(ds))]
        meta = {k: v for k, v in ds.meta.items() if k != "created"}
    report = out + ".errors.csv"
    return {"records": recs, "meta": meta,
            "errors": read_error_report(report) if os.path.exists(report) else None}


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


@pytest.mark.parametrize("ext", FORMATS)
@pytest.mark.parametrize("k", [1, 6, 19])
def test_interrupt_then_resume_is_identical(src, reference, tmp_path, monkeypatch, ext, k):
    out = str(tmp_path / f"o.{ext}")
    with monkeypatch.context() as m:
        interrupt_after(m, k)
        with pytest.raises(KeyboardInterrupt):
            pack(src, out, commit_every=4, jobs=2)
    assert not os.path.exists(out) and not os.path.exists(out + ".errors.csv")
    report = pack(src, out, commit_every=4, jobs=2, resume=True)
    assert snapshot(out) == reference[ext]
    assert names_in(tmp_path) == sorted([f"o.{ext}", f"o.{ext}.errors.csv"])
    assert report.packed + len(report.skipped) == report.found == 19
    # Resumed from the last commit before the interrupted file (commits every 4 files).
    assert report.resumed_from % 4 == 0 and report.resumed_from <= k - 1


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


def test_resume_with_other_options_is_refused(src, tmp_path, monkeypatch):
    out = str(tmp_path / "o.lmdb")
    with monkeypatch.context() as m:
        interrupt_after(m, 10)
        with pytest.raises(KeyboardInterrupt):
            pack(src, out, commit_every=4, jobs=1)
    with pytest.raises(PackError, match="quality: 95 then, 80 now"):
        pack(src, out, commit_every=4, quality=80, resume=True)
    assert os.path.exists(out + ".partial") and not os.path.exists(out)


def test_resume_after_the_source_changed_is_refused(src, tmp_path, monkeypatch):
    import shutil
    copy = shutil.copytree(src, str(tmp_path / "copy"))
    out = str(tmp_path / "o.h5")
    with monkeypatch.context() as m:
        interrupt_after(m, 10)
        with pytest.raises(KeyboardInterrupt):
            pack(copy, out, commit_every=4, jobs=1)
    os.remove(os.path.join(copy, "class_000", "cmyk.jpg"))
    with pytest.raises(PackError, match="source folder changed"):
        pack(copy, out, commit_every=4, resume=True)


def test_resume_with_nothing_to_resume_packs_from_the_start(src, reference, tmp_path):
    out = _pack_ok(src, str(tmp_path / "o.lmdb"), resume=True)
    assert snapshot(out) == reference["lmdb"]


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
    pack(src, out, commit_every=4, resume=True)
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
        real = hw._write_all
        calls = {"n": 0}

        def write_all(fd, buffers):
            calls["n"] += 1
            if calls["n"] == 3:  # the second chunk's images (1: images, 2: journal line, 3: images)
                real(fd, buffers[:len(buffers) // 2])
                raise exc
            real(fd, buffers)

        monkeypatch.setattr(hw, "_write_all", write_all)


@pytest.mark.parametrize("ext", FORMATS)
def test_full_disk_says_where_and_resume_finishes(src, reference, tmp_path, monkeypatch, ext):
    out = str(tmp_path / f"o.{ext}")
    with monkeypatch.context() as m:
        _fail_write_once(m, ext)
        with pytest.raises(PackError, match="the disk is full .* rerun the same command with --resume") as err:
            pack(src, out, commit_every=4, jobs=1)
    assert os.path.basename(out) in str(err.value)
    assert not os.path.exists(out)
    pack(src, out, commit_every=4, resume=True)
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
    pack(src, out, commit_every=4, resume=True)
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
    # The first commit grows the LMDB file past its two meta pages, or writes a journal line.
    marker, empty = (out + ".partial", 8192) if ext == "lmdb" else (out + ".partial.journal", 0)
    import converters
    repo = os.path.dirname(os.path.dirname(os.path.abspath(converters.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_PACK, src, out], env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        if os.path.exists(marker) and os.path.getsize(marker) > empty:
            time.sleep(0.3)  # a few commits in; at least 0.8 s of work is left
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert not os.path.exists(out)
    report = pack(src, out, commit_every=2, resume=True)
    assert report.resumed_from > 0
    assert snapshot(out) == reference[ext]
