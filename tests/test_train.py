"""The included trainer on the CPU: tiny CNN, 32-pixel crops, a few steps per run."""
from __future__ import annotations

import logging
import math
import os
import subprocess
import sys

import pytest
import torch
from test_train_helpers import FAST, REPO, events, one_line_error, pack, run, summary, two_class_folder
from test_train_helpers import restore_torch_globals  # noqa: F401 -- autouse: torch's globals put back

from feedline.train import TrainError, checkpoint
from feedline.train.models import build_model
from feedline.train.schedule import lr_at, warmup_steps_for


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """A packed two-class training set (96 images, LMDB) and validation set (32, HDF5)."""
    root = tmp_path_factory.mktemp("toy")
    train = pack(two_class_folder(root / "train_src", 48, seed=1), root / "train.lmdb")
    val = pack(two_class_folder(root / "val_src", 16, seed=2), root / "val.h5")
    return {"train": str(train), "val": str(val), "root": root}


# -- training works ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def toy_run(toy, tmp_path_factory):
    out = tmp_path_factory.mktemp("toy_run")
    rc = run([toy["train"], "--val", toy["val"], *FAST, "--epochs", "4", "--warmup-epochs", "1", "--lr", "0.2",
              "--synthetic-steps", "3", "--out", out])
    assert rc == 0
    return out


def test_short_run_lowers_the_loss(toy_run):
    steps, epochs = events(toy_run, "step"), events(toy_run, "epoch")
    # 6 steps per epoch, a line every 2 steps, and one more after the very first step.
    assert len(epochs) == 4 and [s["step"] for s in steps] == [1, *range(2, 25, 2)]
    assert epochs[-1]["train_loss"] < epochs[0]["train_loss"]
    assert steps[-1]["loss"] < steps[0]["loss"]
    for r in steps:
        assert r["images_per_s"] > 0 and 0 <= r["data_wait"] <= 1 and r["gpu_mem_gib"] is None


def test_separable_set_reaches_90_percent_top1_on_an_hdf5_val_set(toy_run):
    final = summary(toy_run)["final"]
    assert final["top1"] >= 0.9, final
    assert final["top5"] == 1.0  # two classes: top-5 is top-2
    assert final["val_images"] == 32


def test_run_reports_real_over_synthetic_and_saves(toy_run):
    s = summary(toy_run)
    assert s["real_images_per_s"] > 0 and s["synthetic_images_per_s"] > 0
    assert s["pipeline_share"] == pytest.approx(s["real_images_per_s"] / s["synthetic_images_per_s"])
    state = checkpoint.load(os.path.join(toy_run, "checkpoint.pt"))
    assert state["progress"]["epoch"] == 4 and state["progress"]["step"] == 24
    assert state["version"] == checkpoint.CHECKPOINT_VERSION
    assert not [f for f in os.listdir(toy_run) if ".tmp-" in f]


def test_hdf5_training_set(toy, tmp_path):
    """HDF5 goes through the trainer as TRAIN too, and gives the batches LMDB gives."""
    h5 = pack(toy["root"] / "train_src", tmp_path / "train.h5")
    common = [*FAST, "--epochs", "1", "--lr", "0.1", "--synthetic-steps", "0", "--deterministic"]
    assert run([h5, *common, "--out", tmp_path / "h5"]) == 0
    assert run([toy["train"], *common, "--out", tmp_path / "lmdb"]) == 0
    from_h5, from_lmdb = checkpoint.load(tmp_path / "h5" / "checkpoint.pt"), \
        checkpoint.load(tmp_path / "lmdb" / "checkpoint.pt")
    assert from_h5["progress"]["step"] == 6
    for name, tensor in from_lmdb["model"].items():
        assert torch.equal(from_h5["model"][name], tensor), name


def test_bf16_autocast_runs_on_cpu(toy, tmp_path):
    rc = run([toy["train"], *FAST, "--epochs", "1", "--autocast", "bf16", "--lr", "0.1",
              "--synthetic-steps", "0", "--out", tmp_path])
    assert rc == 0
    assert events(tmp_path, "start")[0]["amp"] == "bf16"
    assert summary(tmp_path)["final"]["train_loss"] > 0  # finite: JSON null otherwise


def test_out_holding_a_run_is_refused_unless_resume_or_overwrite(tmp_path, capsys):
    argv = ["--synthetic", "--arch", "tiny", "--size", "32", "--batch-size", "8", "--synthetic-steps", "1",
            "--num-classes", "10", "--no-progress", "--out", tmp_path]
    assert run(argv) == 0
    first = (tmp_path / "metrics.jsonl").read_text()
    line = one_line_error(capsys, argv)
    assert f"--out {tmp_path} holds a run's log but no checkpoint (metrics.jsonl of a --synthetic run" in line
    assert "nothing to resume; pass --overwrite" in line and (tmp_path / "metrics.jsonl").read_text() == first
    assert run([*argv, "--overwrite"]) == 0
    assert (tmp_path / "metrics.jsonl").read_text() != first


def test_the_pipeline_share_on_a_cpu_says_what_it_means(tmp_path, caplog):
    from feedline.train.distributed import DistInfo
    from feedline.train.report import Reporter
    from feedline.train.result import TrainResult, finish
    result = TrainResult(steps=1, epochs_done=1, real_images_per_s=25.0, synthetic_images_per_s=100.0)
    reporter = Reporter(str(tmp_path), True, 1, False, append=False)
    with caplog.at_level(logging.INFO, logger="feedline.train"):
        finish(result, torch.nn.Linear(2, 2), DistInfo(), reporter)
    reporter.close()
    text = caplog.text
    assert "data pipeline delivers 25% of the model's speed" in text
    assert "on the CPU the loader's workers and the model share the same cores" in text


def test_synthetic_run_needs_no_data(tmp_path, capsys):
    rc = run(["--synthetic", "--arch", "tiny", "--size", "32", "--batch-size", "8", "--synthetic-steps", "4",
              "--num-classes", "10", "--no-progress", "--out", tmp_path])
    assert rc == 0
    assert "synthetic:" in capsys.readouterr().out
    s = summary(tmp_path)
    assert s["steps"] == 4 and s["synthetic_images_per_s"] > 0
    assert not os.path.exists(tmp_path / "checkpoint.pt")


# -- resume --------------------------------------------------------------------------------

def _weights(out) -> dict:
    return checkpoint.load(os.path.join(out, "checkpoint.pt"))


def test_resume_mid_epoch_equals_an_uninterrupted_run(toy, tmp_path):
    common = [toy["train"], *FAST, "--epochs", "2", "--lr", "0.1", "--deterministic",
              "--synthetic-steps", "0", "--accum-steps", "2"]
    assert run([*common, "--out", tmp_path / "whole"]) == 0
    # 6 micro-batches, 3 steps per epoch: stop after step 4, in the middle of epoch 2.
    assert run([*common, "--out", tmp_path / "parts", "--max-steps", "4"]) == 0
    stopped = _weights(tmp_path / "parts")
    assert stopped["progress"]["epoch"] == 1 and stopped["progress"]["step"] == 4
    assert [s["batch"] for s in stopped["loader"]] == [2]   # every rank's loader state: one rank here
    assert run([*common, "--out", tmp_path / "parts", "--resume"]) == 0
    whole, parts = _weights(tmp_path / "whole"), _weights(tmp_path / "parts")
    assert parts["progress"] == whole["progress"]
    # Same batches, same kernels, same order of operations on the CPU: the same bits.
    for name, tensor in whole["model"].items():
        assert torch.equal(parts["model"][name], tensor), name
    for a, b in zip(whole["optimizer"]["state"].values(), parts["optimizer"]["state"].values(), strict=True):
        assert torch.equal(a["momentum_buffer"], b["momentum_buffer"])
    assert parts["scheduler"] == whole["scheduler"]
    assert [e["train_loss"] for e in parts["history"]] == pytest.approx([e["train_loss"] for e in whole["history"]])


def test_save_every_writes_mid_epoch_checkpoints(toy, tmp_path):
    assert run([toy["train"], *FAST, "--epochs", "1", "--lr", "0.1", "--synthetic-steps", "0",
                "--save-every", "2", "--out", tmp_path]) == 0
    saves = events(tmp_path, "checkpoint")
    assert [(r["step"], r["mid_epoch"]) for r in saves] == [(2, True), (4, True), (6, False)]


def test_order_reaches_the_loader_and_resume_refuses_other_options(toy, tmp_path, capsys):
    common = [toy["train"], *FAST, "--epochs", "1", "--synthetic-steps", "0"]
    assert run([*common, "--order", "quasi-random", "--max-steps", "2", "--out", tmp_path]) == 0
    assert _weights(tmp_path)["loader"][0]["order"] == "quasi-random"
    for other, said in ((["--seed", "5"], "--seed 0, this run has 5"),
                        ([], "--order quasi-random, this run has random")):
        err = one_line_error(capsys, [*common, *other, "--out", tmp_path, "--resume"])
        assert said in err
    assert run([*common, "--order", "quasi-random", "--out", tmp_path, "--resume"]) == 0


def test_resume_on_other_ranks_needs_every_ranks_loader_state_and_the_same_data(toy, tmp_path, capsys):
    common = [toy["train"], *FAST, "--epochs", "1", "--synthetic-steps", "0", "--out", tmp_path]
    assert run([*common, "--max-steps", "2"]) == 0
    path = os.path.join(tmp_path, "checkpoint.pt")
    state = _weights(tmp_path)
    assert state["train_records"] == 96 and len(state["loader"]) == 1
    # As an older feedline wrote it on 2 ranks: rank 0's loader state alone.
    checkpoint.save({**state, "world_size": 2, "loader": state["loader"][0]}, path)
    err = one_line_error(capsys, [*common, "--resume"])
    assert ("was written by 2 ranks without every rank's loader position (an older feedline), this run has 1; "
            "resume with the same number of processes") in err
    checkpoint.save({**state, "train_records": 95}, path)
    assert "was trained on 95 images, the data has 96; resume on the same data set" in one_line_error(
        capsys, [*common, "--resume"])


# -- bad input -----------------------------------------------------------------------------


def test_missing_data_file(capsys, tmp_path):
    err = one_line_error(capsys, [tmp_path / "nope.lmdb", "--out", tmp_path])
    assert "no such file" in err and "feedline pack" in err


def test_unknown_architecture(toy, capsys, tmp_path):
    err = one_line_error(capsys, [toy["train"], "--arch", "vgg16", "--out", tmp_path])
    assert "vgg16" in err and "'resnet18', 'resnet50', 'tiny'" in err


def test_batch_larger_than_the_data_set(toy, capsys, tmp_path):
    err = one_line_error(capsys, [toy["train"], *FAST, "--batch-size", "512", "--out", tmp_path])
    assert "--batch-size 96 or less" in err


def test_val_without_labels(toy, capsys, tmp_path):
    flat = tmp_path / "flat"
    flat.mkdir()
    for f in (toy["root"] / "val_src" / "grass").iterdir():
        (flat / f.name).write_bytes(f.read_bytes())
    err = one_line_error(capsys, [toy["train"], "--val", flat, *FAST, "--out", tmp_path])
    assert "has no labels" in err


@pytest.mark.parametrize("module", [["feedline.train"], ["feedline", "train"]])
def test_command_lines_exit_2_with_one_line(module, tmp_path):
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
    with pytest.raises(TrainError, match="architecture must be one of 'resnet18', 'resnet50', 'tiny'"):
        build_model("alexnet")


def test_warmup_then_cosine():
    """timm's: the warmup is as long as asked (5 epochs of 10 steps: 50, even in a 20-step run),
    from 0 here (warmup_lr's default in lr_at), then cosine over the whole run."""
    assert warmup_steps_for(5, 100) == 500 and warmup_steps_for(5, 10) == 50 and warmup_steps_for(0.5, 10) == 5
    assert lr_at(0, 1.0, 4, 20) == pytest.approx(0.0)
    assert lr_at(3, 1.0, 4, 20) == pytest.approx(0.75)
    assert lr_at(10, 1.0, 4, 20) == pytest.approx(0.5)
    assert lr_at(20, 1.0, 4, 20) == pytest.approx(0.0)
    lrs = [lr_at(s, 1.0, 4, 20) for s in range(4, 20)]
    assert lrs == sorted(lrs, reverse=True)


def test_the_start_line_says_the_optimizer_the_warmup_and_the_autocast(toy, tmp_path, caplog):
    """A warmup as long as the run is kept (timm's) and said: the rate never reaches --lr."""
    with caplog.at_level(logging.INFO, logger="feedline.train"):
        assert run([toy["train"], *FAST, "--epochs", "1", "--lr", "0.1", "--synthetic-steps", "0",
                    "--out", tmp_path]) == 0
    start = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("training tiny"))
    assert ("sgd (Nesterov momentum 0.9, weight decay 2e-05); lr 0.1 after 5 warmup epoch(s) (30 steps) from "
            "1e-05, cosine to 0; autocast off (float32)") in start
    assert "--warmup-epochs 5 is as long as the run's 1 epoch(s): the learning rate never reaches its peak" in caplog.text
    assert events(tmp_path, "start")[0]["warmup_steps"] == 30
    assert events(tmp_path, "epoch")[0]["lr"] == pytest.approx(1e-5 + 5 * (0.1 - 1e-5) / 30)   # the last of 6 steps


def test_the_cooldown_trains_more_epochs_at_the_min_lr(toy, tmp_path):
    """timm's --cooldown-epochs: --epochs of warmup and cosine, then N more at --min-lr."""
    assert run([toy["train"], *FAST, "--epochs", "1", "--cooldown-epochs", "1", "--min-lr", "0.001",
                "--warmup-epochs", "0", "--lr", "0.1", "--synthetic-steps", "0", "--out", tmp_path]) == 0
    epochs = events(tmp_path, "epoch")
    assert [e["epoch"] for e in epochs] == [1, 2] and epochs[1]["lr"] == pytest.approx(0.001)
    assert epochs[0]["lr"] == pytest.approx(0.001 + 0.0495 * (1 + math.cos(math.pi * 5 / 6)))


# -- bad records ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def folder_with_a_bad_jpeg(toy):
    """The training images as a folder, one of them a JPEG header followed by junk."""
    import shutil
    root = toy["root"] / "with_bad"
    shutil.copytree(toy["root"] / "train_src", root)
    (root / "rocket" / "007.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg" * 10)
    return root


def test_a_bad_jpeg_is_substituted_by_default_and_reported(folder_with_a_bad_jpeg, tmp_path, capsys):
    assert run([folder_with_a_bad_jpeg, *FAST, "--epochs", "2", "--synthetic-steps", "0", "--out", tmp_path]) == 0
    assert "bad records: 2 (substituted" in capsys.readouterr().out  # once per epoch
    assert [e["bad_records"] for e in events(tmp_path, "epoch")] == [1, 1]
    listed = events(tmp_path, "bad_records")
    assert [r["records"][0]["path"] for r in listed] == ["rocket/007.jpg"] * 2
    assert all(r["records"][0]["substitute"] is not None for r in listed)
    assert summary(tmp_path)["bad_records"] == 2


def test_on_error_raise_stops_at_the_bad_jpeg(folder_with_a_bad_jpeg, tmp_path, capsys):
    err = one_line_error(capsys, [folder_with_a_bad_jpeg, *FAST, "--epochs", "1", "--synthetic-steps", "0",
                                   "--on-error", "raise", "--out", tmp_path])
    assert "rocket/007.jpg" in err and "pass --on-error substitute" in err
