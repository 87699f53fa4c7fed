"""An output the system will not let us write ends `pack`, `sample` and `train --out` with one
line (what, where, what to do) and exit 2, never a raw OSError traceback (issue 23, item 1).

Each case is a real one: a parent that is a file (ENOTDIR), a real read-only tmpfs mounted in
a private mount namespace (EROFS; skipped where `unshare -m` cannot mount), and a folder the
unprivileged user `nobody` may not write (EACCES; chmod does not stop root, so the command
runs as nobody; skipped where that cannot be arranged)."""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from feedline.cli import main
from feedline.dataset.unwritable import unwritable_line
from feedline.sample import make_photo_folder

ROOT = Path(__file__).resolve().parents[1]
TINY_TRAIN = ["--arch", "tiny", "--epochs", "1", "--size", "32", "--device", "cpu", "--batch-size", "2",
              "--no-synthetic", "--no-progress"]


pytestmark = pytest.mark.usefixtures("restore_logging")   # main() calls logging.basicConfig


@pytest.fixture
def world_dir():
    """A folder anyone may read (pytest's tmp_path is root's alone), removed afterwards."""
    path = tempfile.mkdtemp(prefix="feedline-unwritable-")
    os.chmod(path, 0o755)
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


def commands(src: Path, out_parent: Path) -> dict[str, list[str]]:
    return {"pack-lmdb": ["pack", str(src), str(out_parent / "out.lmdb")],
            "pack-hdf5": ["pack", str(src), str(out_parent / "out.h5")],
            "sample": ["sample", str(out_parent / "s"), "-n", "2", "--classes", "1"],
            "train": ["train", str(src), *TINY_TRAIN, "--out", str(out_parent / "run")]}


def assert_one_line(code: int, err: str, where: str, why: str) -> None:
    lines = [line for line in err.strip().splitlines() if not line.startswith("sample: ")]
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("feedline ") and ": error: " in lines[0], err
    assert where in lines[0] and why in lines[0] and "choose a writable place" in lines[0], err


@pytest.mark.parametrize("command", ["pack-lmdb", "pack-hdf5", "sample", "train"])
def test_an_output_under_a_file_is_one_line(tmp_path, capsys, command):
    src = tmp_path / "src"
    make_photo_folder(str(src), n=4, classes=2, seed=0, sizes=[(64, 48)])
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    code = main(commands(src, blocker / "deeper")[command])
    assert_one_line(code, capsys.readouterr().err, str(blocker), "is a file, not a folder")
    assert blocker.read_text() == "not a folder"


def can_mount_read_only(where: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    done = subprocess.run(["unshare", "-m", "mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(where)],
                          capture_output=True)
    return done.returncode == 0


@pytest.mark.parametrize("command", ["pack-lmdb", "pack-hdf5", "sample", "train"])
def test_a_read_only_filesystem_is_one_line(tmp_path, command):
    src, mount = tmp_path / "src", tmp_path / "ro"
    mount.mkdir()
    if not can_mount_read_only(mount):
        pytest.skip("cannot mount a read-only tmpfs here (needs root and `unshare -m`)")
    make_photo_folder(str(src), n=4, classes=2, seed=0, sizes=[(64, 48)])
    argv = " ".join(f"'{a}'" for a in commands(src, mount)[command])
    script = f"mount -t tmpfs -o ro tmpfs '{mount}' && exec '{sys.executable}' -m feedline {argv}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)
    assert_one_line(done.returncode, done.stderr, str(mount), "read-only")


def run_as_nobody() -> bool:
    return os.geteuid() == 0 and shutil.which("setpriv") is not None


def test_permission_denied_is_one_line(world_dir):
    if not run_as_nobody():
        pytest.skip("needs root and setpriv to run the command as nobody (chmod does not stop root)")
    src, locked = world_dir / "src", world_dir / "locked"
    make_photo_folder(str(src), n=4, classes=2, seed=0, sizes=[(64, 48)])
    for path in [src, *src.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    locked.mkdir(mode=0o555)
    os.chmod(locked, 0o555)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(world_dir)}
    for name in ("pack-lmdb", "pack-hdf5", "sample", "train"):
        done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
                               "-m", "feedline", *commands(src, locked)[name]],
                              capture_output=True, text=True, env=env, cwd=world_dir, timeout=300)
        assert_one_line(done.returncode, done.stderr, str(locked), "permission denied")
    assert list(locked.iterdir()) == []


def test_an_error_about_another_path_is_not_blamed_on_the_output(tmp_path):
    out = tmp_path / "out.lmdb"
    an_input = OSError(errno.EACCES, "Permission denied", str(tmp_path / "src" / "a.jpg"))
    assert unwritable_line(an_input, out) is None
    not_ours = OSError(errno.EIO, "Input/output error", str(out) + ".partial")
    assert unwritable_line(not_ours, out) is None
    side_file = OSError(errno.EROFS, "Read-only file system", str(out) + ".partial")
    assert unwritable_line(side_file, out, "OUT").startswith(f"{out}.partial: cannot write OUT {out}")
    above = OSError(errno.EACCES, "Permission denied", str(tmp_path))
    assert "permission denied" in unwritable_line(above, out)
