"""Two torchrun "nodes" on localhost (one process each, c10d rendezvous, gloo): when one
node dies the other ends at once, when one hangs the other ends after --timeout; either
way with one line that says so and a checkpoint that loads.

Node 0 starts first and so hosts the rendezvous store, as the endpoint's machine does in
a real job. (When the store's own node hangs, the other node's feedline process still
ends after --timeout, but torchrun's agent there waits on the frozen store: torchrun's
behaviour, not tested here.)
"""
from __future__ import annotations

import os
import signal
import time

import pytest
from test_train_helpers import DDP, Job, free_port, pack, torchrun, two_class_folder, wait_for_checkpoint, workers

from feedline.train import checkpoint

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("nodes")
    return str(pack(two_class_folder(root / "src", 48, seed=3), root / "train.lmdb"))


def _two_nodes(data, out, tmp_path, *extra):
    """Node 0 first (it hosts the c10d rendezvous store, as the endpoint's node does), then node 1."""
    port = free_port()
    nodes = []
    for rank in (0, 1):
        nodes.append(Job(torchrun(data, *DDP, *extra, "--out", out, nproc=1, nnodes=2, node_rank=rank,
                                  port=port), tmp_path / f"node{rank}.log"))
        time.sleep(2 if rank == 0 else 0)
    return nodes


def test_a_node_killed_mid_epoch_ends_the_other_node(data, tmp_path):
    out = tmp_path / "run"
    node0, node1 = _two_nodes(data, out, tmp_path)
    saved = wait_for_checkpoint(out, node0, 4)
    node1.kill()  # the agent and its worker at once: the machine is gone
    t0 = time.monotonic()
    rc = node0.wait(60)
    ended_in = time.monotonic() - t0
    assert rc != 0 and ended_in < 20, (ended_in, node0.output()[-4000:])
    line = node0.error_line()
    # The closed connection ends it ("Connection reset by peer", "Broken pipe"...), not the timeout.
    assert "lost the other ranks" in line and "Timed out" not in line and "--resume" in line, line
    assert checkpoint.load(str(out / "checkpoint.pt"))["progress"]["step"] >= saved
    # --resume from it: test_train_faults.py resumes after a dead rank, to the same weights.


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
    assert rc != 0 and 4 < ended_in < 25, (ended_in, node0.output()[-4000:])
    line = node0.error_line()
    assert "Timed out" in line and "did not answer for --timeout 5 s" in line, line
    assert checkpoint.load(str(out / "checkpoint.pt"))["progress"]["step"] >= 4
