"""Faults from outside the run, for real: SIGKILL at random points, a rank or a whole node
that dies under torchrun (gloo on the CPU, c10d rendezvous on localhost), a node that hangs.

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
import subprocess
import sys
import time

import pytest
import torch
from test_train_helpers import FAST, REPO, free_port, pack, subprocess_env, torchrun, two_class_folder

from feedline.train import checkpoint

pytestmark = pytest.mark.slow

# 96 images: 6 steps per epoch in one process, 6 per rank with two ranks of batch 8. The
# schedule spans 50 epochs so that no run ends before it is killed; --max-steps ends them.
EPOCHS = ["--epochs", "50", "--synthetic-steps", "0", "--lr", "0.1", "--log-every", "10"]
END = 36


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    return str(pack(two_class_folder(root / "src", 48, seed=3), root / "train.lmdb"))


class Job:
    """A real process (a feedline run or a torchrun agent) with its output in a file."""

    def __init__(self, cmd: list[str], log):
        self.log = log
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=subprocess_env(), stdout=open(log, "w"),
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def output(self) -> str:
        with open(self.log, encoding="utf-8", errors="replace") as fh:
            return fh.read()

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"still running after {timeout} s:\n{self.output()[-3000:]}")

    def kill(self) -> None:
        for pid in [*workers(self.proc.pid).values(), self.proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()


def workers(agent: int) -> dict[int, int]:
    """rank -> pid of the processes torchrun's agent ``agent`` started (from /proc)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            if ppid != agent:
                continue
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = dict(kv.split(b"=", 1) for kv in fh.read().split(b"\0") if b"=" in kv)
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
        if b"RANK" in env:
            found[int(env[b"RANK"])] = int(entry)
    return found


def wait_for_checkpoint(out, job: Job, step: int, timeout: float = 60) -> int:
    """Block until OUT/checkpoint.pt holds at least ``step``; returns the step it holds.
    Reads the metrics log, which records each checkpoint after its rename."""
    deadline = time.monotonic() + timeout
    path = os.path.join(out, "metrics.jsonl")
    while time.monotonic() < deadline:
        if job.proc.poll() is not None:
            pytest.fail(f"ended before step {step}:\n{job.output()[-3000:]}")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                saved = [int(line.split('"step": ')[1].split(",")[0]) for line in fh
                         if '"event": "checkpoint"' in line]
            if saved and saved[-1] >= step:
                return saved[-1]
        time.sleep(0.002)
    job.kill()
    pytest.fail(f"no checkpoint of step {step} after {timeout} s:\n{job.output()[-3000:]}")


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
    args = [data, *FAST, *EPOCHS, "--save-every", "1", "--max-steps", END]
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


# -- torchrun: a rank dies, a node dies, a node hangs ------------------------------------

DDP = [*FAST, "--batch-size", "8", *EPOCHS, "--save-every", "2"]


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
    line = next(ln for ln in text.splitlines() if ln.startswith("feedline train: error: rank 0 of 2"))
    assert ("lost the other ranks" in line or "stopped by SIGTERM" in line), line
    assert "checkpoint.pt (epoch" in line and "--resume" in line
    assert "[rank0]: Traceback" not in text  # torchrun prefixes a worker's traceback with its rank
    assert checkpoint.load(str(out / "checkpoint.pt"))["progress"]["step"] >= saved
    resumed = Job(torchrun(data, *DDP, "--max-steps", END, "--out", out, "--resume"), tmp_path / "resumed.log")
    assert resumed.wait(60) == 0, resumed.output()[-3000:]
    whole = Job(torchrun(data, *DDP, "--max-steps", END, "--out", reference), tmp_path / "whole.log")
    assert whole.wait(60) == 0, whole.output()[-3000:]
    assert_same_weights(out, reference)


def _two_nodes(data, out, tmp_path, *extra):
    """Node 0 first (it hosts the c10d rendezvous store, as the endpoint's node does), then node 1."""
    port = free_port()
    nodes = []
    for rank in (0, 1):
        nodes.append(Job(torchrun(data, *DDP, *extra, "--out", out, nproc=1, nnodes=2, node_rank=rank,
                                  port=port), tmp_path / f"node{rank}.log"))
        time.sleep(2 if rank == 0 else 0)
    return nodes


def test_a_node_killed_mid_epoch_ends_the_other_node_and_resume_continues(data, tmp_path):
    out = tmp_path / "run"
    node0, node1 = _two_nodes(data, out, tmp_path)
    saved = wait_for_checkpoint(out, node0, 4)
    node1.kill()  # the agent and its worker at once: the machine is gone
    t0 = time.monotonic()
    rc = node0.wait(60)
    assert rc != 0 and time.monotonic() - t0 < 20
    text = node0.output()
    line = next(ln for ln in text.splitlines() if ln.startswith("feedline train: error: rank 0 of 2"))
    assert "lost the other ranks" in line and "Connection" in line and "--resume" in line, line
    assert checkpoint.load(str(out / "checkpoint.pt"))["progress"]["step"] >= saved
    resumed = Job(torchrun(data, *DDP, "--max-steps", 12, "--out", out, "--resume"), tmp_path / "resumed.log")
    assert resumed.wait(60) == 0, resumed.output()[-3000:]
    assert checkpoint.load(str(out / "checkpoint.pt"))["progress"]["step"] == 12


def test_a_hung_node_ends_the_other_after_the_timeout(data, tmp_path):
    """SIGSTOP: the node's processes live on and hold their connections, nothing closes;
    only --timeout ends the wait."""
    out = tmp_path / "run"
    node0, node1 = _two_nodes(data, out, tmp_path, "--timeout", "5")
    try:
        wait_for_checkpoint(out, node0, 4)
        for pid in [*workers(node1.proc.pid).values(), node1.proc.pid]:
            os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        rc = node0.wait(60)
        ended_in = time.monotonic() - t0
    finally:
        node1.kill()
    assert rc != 0 and 4 < ended_in < 25, ended_in
    line = next(ln for ln in node0.output().splitlines() if ln.startswith("feedline train: error: rank 0 of 2"))
    assert "Timed out" in line and "did not answer for --timeout 5 s" in line, line
    assert checkpoint.load(str(out / "checkpoint.pt"))["progress"]["step"] >= 4
