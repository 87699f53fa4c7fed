"""Faults from outside the run, for real: SIGKILL at random points, a rank that dies under
torchrun (gloo on the CPU). Nodes that die or hang: test_train_nodes.py.

What is asserted is what a user sees: the survivors end within a bounded time with one
line that says what happened and what to do, the last checkpoint loads, and --resume
continues to the same weights as a run that was never interrupted: bitwise, because on
the CPU with one thread per process the same batches go through the same kernels in the
same order (the data order and crops are functions of (seed, epoch, index), the loader
resumes at its batch, and the checkpoint carries the RNG, momentum and schedule).
"""
from __future__ import annotations

import os
import random
import signal
import sys
import time

import pytest
import torch
from test_train_helpers import DDP, FAST, LONG, Job, pack, torchrun, two_class_folder, wait_for_checkpoint, workers

from feedline.train import checkpoint

pytestmark = pytest.mark.slow

END = 36  # --max-steps of the runs compared


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    return str(pack(two_class_folder(root / "src", 48, seed=3), root / "train.lmdb"))


def assert_same_weights(out, reference) -> None:
    got, want = (checkpoint.load(os.path.join(d, "checkpoint.pt")) for d in (out, reference))
    assert got["progress"] == want["progress"] and got["progress"]["step"] == END
    for name, tensor in want["model"].items():
        assert torch.equal(got["model"][name], tensor), name
    for a, b in zip(want["optimizer"]["state"].values(), got["optimizer"]["state"].values(), strict=True):
        assert torch.equal(a["momentum_buffer"], b["momentum_buffer"])
    assert got["scheduler"] == want["scheduler"]


def feedline_train(*args) -> list[str]:
    return [sys.executable, "-m", "feedline", "train", *map(str, args)]


# -- SIGKILL, one process --------------------------------------------------------------

def test_sigkill_at_random_points_then_resume_gives_the_same_weights(data, tmp_path):
    args = [data, *FAST, *LONG, "--save-every", "1", "--max-steps", END]
    out, reference = tmp_path / "killed", tmp_path / "whole"
    rng = random.Random(13)
    points = sorted(rng.sample(range(2, END - 4), 3))
    for i, step in enumerate(points):
        job = Job(feedline_train(*args, "--out", out, *(["--resume"] if i else [])), tmp_path / f"run{i}.log")
        wait_for_checkpoint(out, job, step)
        time.sleep(rng.uniform(0, 0.03))  # between steps, in a step, or while a checkpoint is written
        job.proc.send_signal(signal.SIGKILL)
        assert job.wait(30) == -signal.SIGKILL
        assert checkpoint.load(str(out / "checkpoint.pt"))["progress"]["step"] >= step
    last = Job(feedline_train(*args, "--out", out, "--resume"), tmp_path / "last.log")
    assert last.wait(60) == 0, last.output()[-3000:]
    assert not [f for f in os.listdir(out) if ".tmp-" in f]  # a torn write is cleared on the next start
    whole = Job(feedline_train(*args, "--out", reference), tmp_path / "whole.log")
    assert whole.wait(60) == 0, whole.output()[-3000:]
    assert_same_weights(out, reference)


def test_sigterm_ends_the_run_with_one_line_that_names_the_checkpoint(data, tmp_path):
    out = tmp_path / "run"
    job = Job(feedline_train(data, *FAST, *LONG, "--save-every", "2", "--out", out), tmp_path / "run.log")
    wait_for_checkpoint(out, job, 4)
    job.proc.send_signal(signal.SIGTERM)
    assert job.wait(30) == 2
    last = job.output().strip().splitlines()[-1]
    saved = checkpoint.load(str(out / "checkpoint.pt"))["progress"]
    assert last.startswith("feedline train: error: the run stopped by SIGTERM at epoch "), last
    where = f"(epoch {saved['epoch'] + 1}, step {saved['step']})"
    assert f"the last checkpoint, {out / 'checkpoint.pt'} {where}, is whole" in last
    assert "--resume" in last and "Traceback" not in job.output()
    assert not [f for f in os.listdir(out) if ".tmp-" in f]


def test_an_interrupt_before_the_first_checkpoint_says_the_way_out_and_it_works(data, tmp_path):
    """Ctrl-C in the first epoch leaves a log and no checkpoint: the interrupted run, a rerun
    and a rerun with --resume each name --overwrite, which starts afresh."""
    out = tmp_path / "run"
    # batch 1: 96 steps in the first epoch, so the interrupt lands in it however fast a step is
    job = Job(feedline_train(data, *FAST, *LONG, "--batch-size", "1", "--out", out), tmp_path / "run.log")
    deadline = time.monotonic() + 60
    while "epoch 1 step 1 " not in job.output() and time.monotonic() < deadline:
        time.sleep(0.05)
    job.proc.send_signal(signal.SIGINT)
    assert job.wait(30) == 130
    said = job.output()
    assert "interrupted at epoch 1, step " in said and "no checkpoint was saved by this run yet" in said
    assert "run the same command again with --overwrite to start afresh" in said
    assert sorted(os.listdir(out)) == ["metrics.jsonl"]
    again = Job(feedline_train(data, *FAST, *LONG, "--out", out), tmp_path / "again.log")
    assert again.wait(60) == 2 and "holds a run's log but no checkpoint" in again.output()
    resumed = Job(feedline_train(data, *FAST, *LONG, "--out", out, "--resume"), tmp_path / "resumed.log")
    assert resumed.wait(60) == 2
    assert "start it afresh with --overwrite instead of --resume" in resumed.output()
    fresh = Job(feedline_train(data, *FAST, *LONG, "--out", out, "--overwrite", "--max-steps", 2), tmp_path / "fresh.log")
    assert fresh.wait(60) == 0, fresh.output()[-3000:]
    assert checkpoint.load(str(out / "checkpoint.pt"))["progress"]["step"] == 2


# -- torchrun: a rank dies, a node dies, a node hangs ------------------------------------

def test_a_rank_killed_under_torchrun_ends_the_job_and_resume_continues(data, tmp_path):
    out, reference = tmp_path / "killed", tmp_path / "whole"
    job = Job(torchrun(data, *DDP, "--out", out), tmp_path / "killed.log")
    saved = wait_for_checkpoint(out, job, 8)
    os.kill(workers(job.proc.pid)[1], signal.SIGKILL)
    t0 = time.monotonic()
    rc = job.wait(60)
    ended_in = time.monotonic() - t0
    text = job.output()
    assert rc != 0 and ended_in < 20, (ended_in, text[-3000:])  # torchrun stops the others at once
    # Rank 0 either sees the closed connection first or torchrun's SIGTERM: one line either way.
    line = job.error_line()
    assert ("lost the other ranks" in line or "stopped by SIGTERM" in line), line
    assert "checkpoint.pt (epoch" in line and "--resume" in line
    assert "[rank0]: Traceback" not in text  # torchrun prefixes a worker's traceback with its rank
    assert checkpoint.load(str(out / "checkpoint.pt"))["progress"]["step"] >= saved
    resumed = Job(torchrun(data, *DDP, "--max-steps", END, "--out", out, "--resume"), tmp_path / "resumed.log")
    assert resumed.wait(60) == 0, resumed.output()[-3000:]
    whole = Job(torchrun(data, *DDP, "--max-steps", END, "--out", reference), tmp_path / "whole.log")
    assert whole.wait(60) == 0, whole.output()[-3000:]
    assert_same_weights(out, reference)


@pytest.mark.parametrize("message", [
    "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:29500",
    "Connection reset by peer",
    "Timed out waiting 5000ms for recv operation to complete",
    # gloo when --timeout ends a collective inside DDP's forward (its buffer broadcast) on a hung peer
    "Application timeout caused pair closure",
])
def test_the_messages_of_a_lost_peer_are_explained_as_one(message):
    from feedline.train.distributed import DistInfo
    from feedline.train.failures import is_peer_failure
    two_ranks = DistInfo(rank=0, world_size=2, backend="gloo")
    assert is_peer_failure(RuntimeError(message), two_ranks)
    assert not is_peer_failure(RuntimeError(message), DistInfo())            # no peers: a bug of this run
    assert not is_peer_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied"), two_ranks)
