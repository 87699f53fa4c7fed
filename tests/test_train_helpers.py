"""Shared by the trainer's tests (tests/test_train*.py); holds no tests itself.

Data: two classes cut from two different real photos (grass, rocket), so a tiny CNN
learns them in a few steps; still real JPEG photo crops with jitter and noise.
"""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time

import cv2
import pytest
import torch

from feedline.train.command import main as train_main
from feedline.sample import make_image, photo_paths

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = [(96, 72), (72, 96), (80, 80)]
# The tiny CNN on 32-pixel crops: a step takes milliseconds on one CPU core.
FAST = ["--arch", "tiny", "--size", "32", "--batch-size", "16", "--threads", "1", "--log-every", "2",
        "--no-progress"]
# 96 images: 6 steps per epoch in one process, 6 per rank with two ranks of batch 8. The
# schedule spans 50 epochs so that no run ends before it is killed; --max-steps ends them.
LONG = ["--epochs", "50", "--synthetic-steps", "0", "--lr", "0.1", "--log-every", "10"]
DDP = [*FAST, "--batch-size", "8", *LONG, "--save-every", "2"]


@pytest.fixture(autouse=True)
def restore_torch_globals():
    """Runs in this process flip process-wide switches (determinism, seeds): put them back.
    Autouse in every test module that imports it."""
    det, det_warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    bench, cudnn_det = torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic
    rng = torch.get_rng_state()
    yield
    torch.use_deterministic_algorithms(det, warn_only=det_warn)
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = bench, cudnn_det
    torch.set_rng_state(rng)


def two_class_folder(root, per_class: int, seed: int, classes=("grass", "rocket")):
    photos = {os.path.splitext(os.path.basename(p))[0]: p for p in photo_paths()}
    rng = random.Random(seed)
    for name in classes:
        src = cv2.imread(photos[name], cv2.IMREAD_COLOR)
        os.makedirs(root / name, exist_ok=True)
        for i in range(per_class):
            (root / name / f"{i:03d}.jpg").write_bytes(make_image(rng, src, gray_fraction=0.0, sizes=SIZES))
    return root


def pack(folder, out):
    from converters import pack as pack_folder
    pack_folder(str(folder), str(out))
    return out


def run(argv) -> int:
    """`python -m feedline.train ARGV` in this process: its exit code."""
    return train_main([str(a) for a in argv])


def one_line_error(capsys, argv) -> str:
    """Runs ARGV, which must fail with exit code 2 and one line on stderr; returns the line."""
    rc = run(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.count("\n") == 1 and err.startswith("feedline train: error: "), err
    return err


def metrics(out) -> list[dict]:
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def events(out, kind: str) -> list[dict]:
    return [r for r in metrics(out) if r["event"] == kind]


def summary(out) -> dict:
    return events(out, "summary")[-1]


def subprocess_env() -> dict:
    """One thread per process (the machine has two cores and several processes run)."""
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO, PYTHONUNBUFFERED="1")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(*args: str, nproc: int = 2, nnodes: int = 1, node_rank: int = 0, port: int | None = None,
             max_restarts: int = 0) -> list[str]:
    """A real `torchrun` command line running `python -m feedline.train ARGS`: standalone on one
    node, or one node of ``nnodes`` meeting at a c10d rendezvous on localhost:``port``."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
           f"--max-restarts={max_restarts}", "--monitor-interval=0.2"]
    if nnodes == 1:
        cmd.append("--standalone")
    else:
        cmd += [f"--nnodes={nnodes}", f"--node-rank={node_rank}", "--rdzv-backend=c10d",
                f"--rdzv-endpoint=localhost:{port}", "--rdzv-id=feedline-test"]
    return [*cmd, "-m", "feedline.train", *map(str, args)]


class Job:
    """A real process (a feedline run or a torchrun agent) with its output in a file."""

    def __init__(self, cmd: list[str], log):
        self.log = log
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=subprocess_env(), stdout=open(log, "w"),
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def output(self) -> str:
        with open(self.log, encoding="utf-8", errors="replace") as fh:
            return fh.read()

    def error_line(self, start: str = "feedline train: error: rank 0 of 2") -> str:
        """The line of the output that starts with ``start``; fails with the output without one."""
        text = self.output()
        lines = [ln for ln in text.splitlines() if ln.startswith(start)]
        assert len(lines) == 1, text[-4000:]
        return lines[0]

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
