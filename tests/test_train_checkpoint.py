"""Checkpoints: atomic on every failure (a failed write, a killed process, a full disk for
real on a small tmpfs), refused when damaged or of an unknown version, continued with --resume."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from test_train_helpers import FAST, REPO, events, one_line_error, pack, run, two_class_folder

from feedline.train import TrainError, checkpoint


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    return str(pack(two_class_folder(root / "src", 48, seed=1), root / "train.lmdb"))


def _state(step: int, w: torch.Tensor, **extra) -> dict:
    return {"format": checkpoint.CHECKPOINT_FORMAT, "version": checkpoint.CHECKPOINT_VERSION,
            "model": {"w": w}, "step": step, **extra}



# -- a write that fails, a process that dies -----------------------------------------------

def test_failed_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    path = str(tmp_path / "checkpoint.pt")
    checkpoint.save(_state(1, torch.ones(3)), path)

    def broken_write(state, fh):
        fh.write(b"PK\x03\x04 half a checkpoint")
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(checkpoint, "_write", broken_write)
    with pytest.raises(OSError, match="Input/output error"):
        checkpoint.save(_state(2, torch.zeros(3)), path)
    state = checkpoint.load(path)
    assert state["step"] == 1 and torch.equal(state["model"]["w"], torch.ones(3))
    assert os.listdir(tmp_path) == ["checkpoint.pt"]


def test_process_killed_while_saving_leaves_the_previous_checkpoint(tmp_path):
    path = str(tmp_path / "checkpoint.pt")
    checkpoint.save(_state(1, torch.ones(3)), path)
    script = (
        "import os, torch\n"
        "from feedline.train import checkpoint\n"
        "def dying_write(state, fh):\n"
        "    fh.write(b'PK\\x03\\x04 half'); fh.flush(); os._exit(9)  # as SIGKILL: no cleanup\n"
        "checkpoint._write = dying_write\n"
        f"checkpoint.save({{'model': {{'w': torch.zeros(3)}}, 'step': 2}}, {path!r})\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 9, proc.stderr
    torn = [f for f in os.listdir(tmp_path) if ".tmp-" in f]
    assert len(torn) == 1  # the torn file is only the temporary one
    assert checkpoint.load(path)["step"] == 1
    # The next run that writes checkpoints there clears what the killed one left.
    assert checkpoint.remove_stale_temporaries(path) == [str(tmp_path / torn[0])]
    assert os.listdir(tmp_path) == ["checkpoint.pt"]


# -- refused checkpoints -------------------------------------------------------------------

def test_damaged_checkpoint_is_a_one_line_error(data, tmp_path, capsys):
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    err = one_line_error(capsys, [data, *FAST, "--out", tmp_path, "--resume"])
    assert "not a readable checkpoint" in err


def test_unknown_checkpoint_version_names_both(data, tmp_path, capsys):
    assert run([data, *FAST, "--epochs", "1", "--synthetic-steps", "0", "--out", tmp_path]) == 0
    path = tmp_path / "checkpoint.pt"
    state = torch.load(path, weights_only=True)
    state["version"] = checkpoint.CHECKPOINT_VERSION + 1
    torch.save(state, path)
    err = one_line_error(capsys, [data, *FAST, "--epochs", "2", "--out", tmp_path, "--resume"])
    assert f"version {checkpoint.CHECKPOINT_VERSION + 1}" in err
    assert f"reads version {checkpoint.CHECKPOINT_VERSION}" in err and "newer feedline" in err
    with pytest.raises(TrainError, match="version 0"):
        checkpoint.check_version(0, str(path))


def test_a_file_that_is_not_a_training_checkpoint(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save({"model": {"w": torch.ones(1)}}, path)
    with pytest.raises(TrainError, match="not a feedline training checkpoint"):
        checkpoint.load(str(path))


# -- a full disk, for real -----------------------------------------------------------------

# The small_disk fixture (conftest): one tiny-CNN checkpoint fits, not two at once.
SMALL_DISK = ("1536k", "32m")


def test_disk_full_while_writing_keeps_the_previous_checkpoint(small_disk):
    """The size estimate passes (it counts tensors; the rest is a long history), the write
    itself hits ENOSPC: torch.save reports it as a RuntimeError, the error says disk full."""
    path = str(small_disk.path / "checkpoint.pt")
    checkpoint.save(_state(1, torch.ones(1000)), path)
    too_big = _state(2, torch.zeros(1000), history=[f"{i:4d}" + "x" * 4096 for i in range(512)])  # 2 MiB
    assert checkpoint.size_estimate(too_big) < 1 << 20
    with pytest.raises(TrainError) as err:
        checkpoint.save(too_big, path)
    text = str(err.value)
    assert text.startswith(f"disk full: saving the checkpoint {path} needs about ")
    assert f"MiB are free in {small_disk.path}" in text
    assert f"the previous checkpoint {path} is intact" in text and "--resume" in text
    assert checkpoint.load(path)["step"] == 1
    assert os.listdir(small_disk.path) == ["checkpoint.pt"]


def test_training_on_a_full_disk_stops_cleanly_and_resumes_exactly(data, small_disk, tmp_path, capsys):
    """Checkpoints every step into a disk that holds one: the second save is refused before
    a byte is written, the first stays loadable, and once there is room --resume ends with
    the weights of a run that never stopped."""
    common = [data, *FAST, "--epochs", "1", "--synthetic-steps", "0", "--save-every", "1"]
    out = small_disk.path / "run"
    err = one_line_error(capsys, [*common, "--out", out])
    assert f"disk full: saving the checkpoint {out / 'checkpoint.pt'} needs about" in err
    assert "is intact" in err and "--resume" in err
    kept = checkpoint.load(str(out / "checkpoint.pt"))
    assert kept["progress"]["step"] == 1 and not [f for f in os.listdir(out) if ".tmp-" in f]
    small_disk.grow()
    assert run([*common, "--out", out, "--resume"]) == 0
    assert run([*common, "--out", tmp_path / "whole"]) == 0
    resumed, whole = checkpoint.load(str(out / "checkpoint.pt")), checkpoint.load(str(tmp_path / "whole" / "checkpoint.pt"))
    assert resumed["progress"] == whole["progress"] and resumed["progress"]["step"] == 6
    for name, tensor in whole["model"].items():
        assert torch.equal(resumed["model"][name], tensor), name
    assert events(out, "start")[-1]["resumed_at"] == {"epoch": 1, "step": 1}   # counted from 1, as the log
