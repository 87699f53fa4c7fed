"""Shared by the trainer's tests (tests/test_train*.py); holds no tests itself.

Data: two classes cut from two different real photos (grass, rocket), so a tiny CNN
learns them in a few steps; still real JPEG photo crops with jitter and noise.
"""
from __future__ import annotations

import json
import os
import random
import socket
import sys

import cv2

from feedline.cli.train import main as train_main
from feedline.sample import make_image, photo_paths

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = [(96, 72), (72, 96), (80, 80)]
# The tiny CNN on 32-pixel crops: a step takes milliseconds on one CPU core.
FAST = ["--arch", "tiny", "--size", "32", "--batch-size", "16", "--threads", "1", "--log-every", "2",
        "--no-progress"]


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
