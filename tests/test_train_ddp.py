"""Two real processes under torchrun (gloo on the CPU): ranks stay in step and in sync, and
validation counts every image of a set whose size is not a multiple of the ranks once."""
from __future__ import annotations

import os
import subprocess

import pytest
import torch
import torch.nn.functional as F
from test_train_helpers import FAST, REPO, events, pack, subprocess_env, summary, torchrun, two_class_folder

from feedline import FeedLoader, OrderSpec
from feedline.train import checkpoint
from feedline.train.models import build_model

pytestmark = pytest.mark.slow

VAL_IMAGES = 31  # odd: two ranks cannot split it evenly


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    train = pack(two_class_folder(root / "train_src", 48, seed=1), root / "train.lmdb")
    val_src = two_class_folder(root / "val_src", 16, seed=2)
    os.remove(val_src / "rocket" / "015.jpg")
    val = pack(val_src, root / "val.h5")
    out = root / "run"
    args = [train, "--val", val, *FAST, "--batch-size", "8", "--epochs", "1", "--accum-steps", "2",
            "--lr", "0.1", "--synthetic-steps", "2"]
    proc = subprocess.run(torchrun(*args, "--out", out), cwd=REPO, env=subprocess_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"out": out, "val": str(val), "stdout": proc.stdout, "args": args, "root": root}


def test_two_ranks_stay_in_step_and_in_sync(ddp_run):
    s = summary(ddp_run["out"])
    # 96 images, 48 per rank, 6 micro-batches of 8, 3 steps with accumulation over 2.
    assert s["steps_per_rank"] == [3, 3]
    assert s["ranks_in_sync"] is True
    assert events(ddp_run["out"], "start")[0]["world_size"] == 2
    assert ddp_run["stdout"].count("metrics:") == 1  # rank 0 speaks for the job


def test_validation_counts_each_image_once_over_the_ranks(ddp_run):
    """16 images on rank 0 and 15 on rank 1, not 16 + 16 with one counted twice; loss and
    top-1 equal a one-process evaluation of the saved weights, done here by hand."""
    final = summary(ddp_run["out"])["final"]
    assert final["val_images"] == VAL_IMAGES
    state = checkpoint.load(os.path.join(ddp_run["out"], "checkpoint.pt"))
    model = build_model("tiny", num_classes=2)
    model.load_state_dict(state["model"])
    model.eval()
    loss = hits = seen = 0.0
    with FeedLoader(ddp_run["val"], batch_size=5, train=False, size=32, num_workers=1, device="cpu",
                    order=OrderSpec(rank=0, world_size=1)) as loader, torch.no_grad():
        for images, labels in loader:
            logits = model(images)
            loss += F.cross_entropy(logits, labels, reduction="sum").item()
            hits += (logits.argmax(1) == labels).sum().item()
            seen += len(labels)
    assert seen == VAL_IMAGES
    assert final["top1"] == pytest.approx(hits / seen)
    assert final["val_loss"] == pytest.approx(loss / seen, rel=1e-4)


def test_a_two_rank_run_resumed_mid_epoch_counts_the_epochs_loss_once(ddp_run):
    """Stopped after its first of three steps and resumed: the epoch's train loss is the
    uninterrupted run's, each rank restoring its share of the loss summed before the stop."""
    out = ddp_run["root"] / "parts"
    for extra in (["--max-steps", "1"], ["--resume"]):
        proc = subprocess.run(torchrun(*ddp_run["args"], "--out", out, *extra), cwd=REPO, env=subprocess_env(),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    whole = checkpoint.load(os.path.join(ddp_run["out"], "checkpoint.pt"))
    parts = checkpoint.load(os.path.join(out, "checkpoint.pt"))
    assert parts["progress"]["step"] == whole["progress"]["step"] == 3
    assert [e["train_loss"] for e in parts["history"]] == pytest.approx(
        [e["train_loss"] for e in whole["history"]], rel=1e-4)


def test_a_two_rank_run_resumed_on_three_ranks_continues_the_epoch(ddp_run):
    """Stopped after its first step on 2 ranks (2 micro-batches of 8 a rank: 32 of 96 images)
    and resumed on 3: the loaders deal the 64 images left, 22 a rank, 2 micro-batches of 8 (the
    last partial one dropped, as --drop-last does in training); the run's steps become those of
    3 ranks (4 micro-batches, 2 steps an epoch), the resumed epoch ending at step 2, the next
    one a normal epoch."""
    out = ddp_run["root"] / "elastic"
    args = [*ddp_run["args"], "--epochs", "2", "--out", out]   # the later --epochs wins
    for nproc, extra in ((2, ["--max-steps", "1"]), (3, ["--resume"])):
        proc = subprocess.run(torchrun(*args, *extra, nproc=nproc), cwd=REPO, env=subprocess_env(),
                              capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        if nproc == 2:
            stopped = checkpoint.load(os.path.join(out, "checkpoint.pt"))
    assert stopped["world_size"] == 2 and [s["rank"] for s in stopped["loader"]] == [0, 1]
    assert [s["batch"] for s in stopped["loader"]] == [2, 2]
    said = proc.stdout + proc.stderr
    assert ("resumed on 3 ranks from a checkpoint of 2: epoch 1 continues from batch 2 of 4 (the records no rank "
            "trained on), at step 1 of this run's schedule") in said
    assert events(out, "start")[-1]["world_size"] == 3 and events(out, "start")[-1]["resumed_at"]["step"] == 1
    final = checkpoint.load(os.path.join(out, "checkpoint.pt"))
    assert final["world_size"] == 3 and final["progress"]["epoch"] == 2 and final["progress"]["step"] == 4
    assert [e["step"] for e in final["history"]] == [2, 4]
    assert summary(out)["steps_per_rank"] == [4, 4, 4]
