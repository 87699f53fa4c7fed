"""The worker engine under DDP: two real ranks (torchrun, gloo on the CPU) each get, with
engine="processes", exactly the batches engine="threads" gives them, including after a
mid-epoch resume, and those are the rank's share as a one-process loader computes it."""
from __future__ import annotations

import os
import signal
import sys

import pytest
import torch
from test_train_helpers import REPO, Job

from feedline import FeedLoader, OrderSpec
from feedline.core.config import usable_cores
from engines_rank import OPTIONS

pytestmark = pytest.mark.slow


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (the agent's ranks, the ranks' workers), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    children.setdefault(int(fh.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(a, b))


def test_each_rank_gets_the_same_batches_from_workers_as_from_threads(packed_lmdb, tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           "--monitor-interval=0.2", os.path.join(REPO, "tests", "engines_rank.py"), str(packed_lmdb), str(tmp_path)]
    job = Job(cmd, tmp_path / "torchrun.log")
    try:
        assert job.wait(timeout=240) == 0, job.output()[-4000:]
    finally:   # nothing it started outlives the test: the agent, its ranks, their workers
        for pid in [*descendants(job.proc.pid), job.proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        job.proc.wait()
    ranks = [torch.load(tmp_path / f"rank-{r}.pt", weights_only=False) for r in range(2)]
    for rank, got in enumerate(ranks):
        assert got["position"] == (rank, 2) and got["local_world_size"] == "2"
        assert got["auto_workers"] == max(1, usable_cores() // 2)   # the node's cores shared by its 2 ranks
        for epoch in (0, 1):   # the rank's share, as a one-process loader told its place computes it
            with FeedLoader(str(packed_lmdb), engine="threads", order=OrderSpec(rank=rank, world_size=2),
                            **OPTIONS) as reference:
                reference.set_epoch(epoch)
                expected = [(x.clone(), y.clone()) for x, y in reference]
            assert len(expected) == 6   # 48 records, 24 per rank, batches of 4
            for engine in ("threads", "processes"):
                assert got[engine]["in_step"], engine
                assert same(got[engine][f"epoch{epoch}"], expected), (rank, epoch, engine)
        assert same(got["processes"]["epoch1"], got["threads"]["epoch1"])
    assert not same(ranks[0]["threads"]["epoch0"], ranks[1]["threads"]["epoch0"])   # two shares, not one twice
