"""The included trainer on the CPU: tiny CNN, 32-pixel crops, a few steps per run."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import cv2
import pytest
import torch

from feedline.cli.train import main as train_main
from feedline.sample import make_image, photo_paths
from feedline.train import TrainError, checkpoint
from feedline.train.models import build_model
from feedline.train.schedule import lr_at, warmup_steps_for

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = [(96, 72), (72, 96), (80, 80)]
FAST = ["--arch", "tiny", "--size", "32", "--batch-size", "16", "--threads", "1", "--log-every", "2",
        "--no-progress"]


def _two_class_folder(root, per_class: int, seed: int):
    """Class 'grass' cut from the grass photo, class 'rocket' from the rocket photo: easy to
    tell apart, still real JPEG photo crops with jitter and noise."""
    photos = {os.path.splitext(os.path.basename(p))[0]: p for p in photo_paths()}
    rng = random.Random(seed)
    for name in ("grass", "rocket"):
        src = cv2.imread(photos[name], cv2.IMREAD_COLOR)
        os.makedirs(root / name, exist_ok=True)
        for i in range(per_class):
            (root / name / f"{i:03d}.jpg").write_bytes(make_image(rng, src, gray_fraction=0.0, sizes=SIZES))
    return root


def _pack(folder, out):
    from converters import pack
    pack(str(folder), str(out))
    return out


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """A packed two-class training set (96 images) and a packed validation set (32)."""
    root = tmp_path_factory.mktemp("toy")
    train = _pack(_two_class_folder(root / "train_src", 48, seed=1), root / "train.lmdb")
    val = _pack(_two_class_folder(root / "val_src", 16, seed=2), root / "val.lmdb")
    return {"train": str(train), "val": str(val), "root": root}


@pytest.fixture(autouse=True)
def _restore_torch_globals():
    """Runs in this process flip process-wide switches (determinism, seeds): put them back."""
    det, det_warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    bench, cudnn_det = torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic
    rng = torch.get_rng_state()
    yield
    torch.use_deterministic_algorithms(det, warn_only=det_warn)
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = bench, cudnn_det
    torch.set_rng_state(rng)


def _metrics(out) -> list[dict]:
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _summary(out) -> dict:
    return [r for r in _metrics(out) if r["event"] == "summary"][-1]


def _run(argv) -> int:
    return train_main([str(a) for a in argv])


# -- training works ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def toy_run(toy, tmp_path_factory):
    out = tmp_path_factory.mktemp("toy_run")
    rc = _run([toy["train"], "--val", toy["val"], *FAST, "--epochs", "4", "--lr", "0.2",
               "--synthetic-steps", "3", "--out", out])
    assert rc == 0
    return out


def test_short_run_lowers_the_loss(toy_run):
    steps = [r for r in _metrics(toy_run) if r["event"] == "step"]
    epochs = [r for r in _metrics(toy_run) if r["event"] == "epoch"]
    assert len(epochs) == 4 and len(steps) == 4 * 6 // 2
    assert epochs[-1]["train_loss"] < epochs[0]["train_loss"]
    assert steps[-1]["loss"] < steps[0]["loss"]
    for r in steps:
        assert r["images_per_s"] > 0 and 0 <= r["data_wait"] <= 1 and r["gpu_mem_gib"] is None


def test_separable_set_reaches_90_percent_top1(toy_run):
    final = _summary(toy_run)["final"]
    assert final["top1"] >= 0.9, final
    assert final["top5"] == 1.0  # two classes: top-5 is top-2
    assert final["val_images"] == 32


def test_run_reports_real_over_synthetic_and_saves(toy_run):
    s = _summary(toy_run)
    assert s["real_images_per_s"] > 0 and s["synthetic_images_per_s"] > 0
    assert s["pipeline_share"] == pytest.approx(s["real_images_per_s"] / s["synthetic_images_per_s"])
    state = checkpoint.load(os.path.join(toy_run, "checkpoint.pt"))
    assert state["progress"]["epoch"] == 4 and state["progress"]["step"] == 24
    assert not [f for f in os.listdir(toy_run) if ".tmp-" in f]


def test_bf16_autocast_runs_on_cpu(toy, tmp_path):
    rc = _run([toy["train"], *FAST, "--epochs", "1", "--amp", "bf16", "--lr", "0.1",
               "--synthetic-steps", "0", "--out", tmp_path])
    assert rc == 0
    start = [r for r in _metrics(tmp_path) if r["event"] == "start"][0]
    assert start["amp"] == "bf16"
    assert _summary(tmp_path)["final"]["train_loss"] > 0  # finite: JSON null otherwise


def test_synthetic_run_needs_no_data(tmp_path, capsys):
    rc = _run(["--synthetic", "--arch", "tiny", "--size", "32", "--batch-size", "8", "--synthetic-steps", "4",
               "--num-classes", "10", "--no-progress", "--out", tmp_path])
    assert rc == 0
    assert "synthetic:" in capsys.readouterr().out
    s = _summary(tmp_path)
    assert s["steps"] == 4 and s["synthetic_images_per_s"] > 0
    assert not os.path.exists(tmp_path / "checkpoint.pt")


# -- resume --------------------------------------------------------------------------------

def _weights(out) -> dict:
    return checkpoint.load(os.path.join(out, "checkpoint.pt"))


def test_resume_mid_epoch_equals_an_uninterrupted_run(toy, tmp_path):
    common = [toy["train"], *FAST, "--epochs", "2", "--lr", "0.1", "--deterministic",
              "--synthetic-steps", "0", "--accum-steps", "2"]
    assert _run([*common, "--out", tmp_path / "whole"]) == 0
    # 6 micro-batches, 3 steps per epoch: stop after step 4, in the middle of epoch 2.
    assert _run([*common, "--out", tmp_path / "parts", "--max-steps", "4"]) == 0
    stopped = _weights(tmp_path / "parts")
    assert stopped["progress"]["epoch"] == 1 and stopped["progress"]["step"] == 4
    assert stopped["loader"]["batch"] == 2
    assert _run([*common, "--out", tmp_path / "parts", "--resume"]) == 0
    whole, parts = _weights(tmp_path / "whole"), _weights(tmp_path / "parts")
    assert parts["progress"] == whole["progress"]
    for name, tensor in whole["model"].items():
        torch.testing.assert_close(parts["model"][name], tensor, rtol=1e-5, atol=1e-6, msg=name)
    for a, b in zip(whole["optimizer"]["state"].values(), parts["optimizer"]["state"].values()):
        torch.testing.assert_close(a["momentum_buffer"], b["momentum_buffer"], rtol=1e-5, atol=1e-6)
    assert parts["scheduler"] == whole["scheduler"]
    assert [round(e["train_loss"], 4) for e in parts["history"]] == \
           [round(e["train_loss"], 4) for e in whole["history"]]


def test_save_every_writes_mid_epoch_checkpoints(toy, tmp_path):
    assert _run([toy["train"], *FAST, "--epochs", "1", "--lr", "0.1", "--synthetic-steps", "0",
                 "--save-every", "2", "--out", tmp_path]) == 0
    saves = [r for r in _metrics(tmp_path) if r["event"] == "checkpoint"]
    assert [(r["step"], r["mid_epoch"]) for r in saves] == [(2, True), (4, True), (6, False)]


# -- atomic checkpoints --------------------------------------------------------------------

def test_failed_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    path = str(tmp_path / "checkpoint.pt")
    checkpoint.save({"model": {"w": torch.ones(3)}, "step": 1}, path)

    def broken_write(state, fh):
        fh.write(b"PK\x03\x04 half a checkpoint")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint, "_write", broken_write)
    with pytest.raises(OSError):
        checkpoint.save({"model": {"w": torch.zeros(3)}, "step": 2}, path)
    state = checkpoint.load(path)
    assert state["step"] == 1 and torch.equal(state["model"]["w"], torch.ones(3))
    assert os.listdir(tmp_path) == ["checkpoint.pt"]


def test_process_killed_while_saving_leaves_the_previous_checkpoint(tmp_path):
    path = str(tmp_path / "checkpoint.pt")
    checkpoint.save({"model": {"w": torch.ones(3)}, "step": 1}, path)
    script = (
        "import os, torch\n"
        "from feedline.train import checkpoint\n"
        "def dying_write(state, fh):\n"
        "    fh.write(b'PK\\x03\\x04 half'); fh.flush(); os._exit(9)  # as SIGKILL: no cleanup\n"
        "checkpoint._write = dying_write\n"
        f"checkpoint.save({{'model': {{'w': torch.zeros(3)}}, 'step': 2}}, {path!r})\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 9, proc.stderr
    assert any(".tmp-" in f for f in os.listdir(tmp_path))  # the torn file is only the temporary one
    assert checkpoint.load(path)["step"] == 1


def test_damaged_checkpoint_is_a_one_line_error(toy, tmp_path, capsys):
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    rc = _run([toy["train"], *FAST, "--out", tmp_path, "--resume"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "not a readable checkpoint" in err


# -- distributed ---------------------------------------------------------------------------

@pytest.mark.slow
def test_two_process_ddp_on_gloo_stays_in_sync(toy, tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "feedline.train", toy["train"], "--val", toy["val"], *FAST, "--batch-size", "8",
           "--epochs", "1", "--accum-steps", "2", "--lr", "0.1", "--synthetic-steps", "2",
           "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = _summary(tmp_path)
    # 96 images, 48 per rank, 6 micro-batches of 8, 3 steps with accumulation over 2.
    assert s["steps_per_rank"] == [3, 3]
    assert s["ranks_in_sync"] is True
    assert s["final"]["val_images"] == 32
    start = [r for r in _metrics(tmp_path) if r["event"] == "start"][0]
    assert start["world_size"] == 2
    assert proc.stdout.count("metrics:") == 1  # rank 0 speaks for the job


# -- bad input -----------------------------------------------------------------------------

def _one_line_error(capsys, argv) -> str:
    rc = _run(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.count("\n") == 1 and err.startswith("feedline train: error: "), err
    return err


def test_missing_data_file(capsys, tmp_path):
    err = _one_line_error(capsys, [tmp_path / "nope.lmdb", "--out", tmp_path])
    assert "no such file" in err and "feedline pack" in err


def test_unknown_architecture(toy, capsys, tmp_path):
    err = _one_line_error(capsys, [toy["train"], "--arch", "vgg16", "--out", tmp_path])
    assert "vgg16" in err and "resnet18" in err


def test_batch_larger_than_the_data_set(toy, capsys, tmp_path):
    err = _one_line_error(capsys, [toy["train"], *FAST, "--batch-size", "512", "--out", tmp_path])
    assert "--batch-size 96 or less" in err


def test_val_without_labels(toy, capsys, tmp_path):
    flat = tmp_path / "flat"
    flat.mkdir()
    for f in (toy["root"] / "val_src" / "grass").iterdir():
        (flat / f.name).write_bytes(f.read_bytes())
    err = _one_line_error(capsys, [toy["train"], "--val", flat, *FAST, "--out", tmp_path])
    assert "has no labels" in err


@pytest.mark.parametrize("module", [["feedline.train"], ["feedline", "train"]])
def test_command_lines_exit_2_with_one_line(module, tmp_path):
    if module[0] == "feedline":  # `feedline` imports every subcommand's module
        from feedline.cli import COMMANDS
        for name in COMMANDS:
            pytest.importorskip(f"feedline.cli.{name}", reason="another subcommand is not written yet")
    proc = subprocess.run([sys.executable, "-m", *module, str(tmp_path / "nope.lmdb"), "--out", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "no such file" in proc.stderr


# -- parts -------------------------------------------------------------------------------

@pytest.mark.parametrize("arch, blocks", [("resnet18", 8), ("resnet50", 16)])
def test_resnets_follow_the_recipe(arch, blocks):
    model = build_model(arch, num_classes=7)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert all(c.bias is None for c in convs)
    zeroed = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d) and not m.weight.any()]
    assert len(zeroed) == blocks
    with torch.no_grad():
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 7)
    n_params = sum(p.numel() for p in build_model(arch, 1000).parameters())
    assert n_params == {"resnet18": 11_689_512, "resnet50": 25_557_032}[arch]  # torchvision's counts


def test_unknown_model_name_is_a_train_error():
    with pytest.raises(TrainError, match="unknown architecture"):
        build_model("alexnet")


def test_warmup_then_cosine():
    assert warmup_steps_for(5, 100, 1000) == 200 and warmup_steps_for(5, 10, 1000) == 50
    assert lr_at(0, 1.0, 4, 20) == pytest.approx(0.25)
    assert lr_at(3, 1.0, 4, 20) == pytest.approx(1.0)
    assert lr_at(12, 1.0, 4, 20) == pytest.approx(0.5)
    assert lr_at(20, 1.0, 4, 20) == pytest.approx(0.0)
    lrs = [lr_at(s, 1.0, 4, 20) for s in range(4, 20)]
    assert lrs == sorted(lrs, reverse=True)
