"""Elastic resume under real DDP (torchrun, gloo on the CPU): 4 ranks stopped mid-epoch, their
gathered loader states resumed on 2 ranks (batch 3, worker processes) and on 3 ranks (batch 5,
two threads), for orders random, quasi-random and shards. Over the epoch every record is
delivered once (plus DistributedSampler's padding: one record twice when the rest does not
divide evenly), with the pixels of the uninterrupted 4-rank epoch; every rank gets as many
batches; the next epoch is a normal one; a resumed loader's states resume again."""
from __future__ import annotations

import json
import os
import sys

import pytest
import torch
from position_helpers import ORDERS, RECORDS, make_loader, pack_one_class_per_record, samples
from test_sources_processes_ddp import descendants
from test_train_helpers import REPO, Job

pytestmark = pytest.mark.slow


def torchrun(ranks: int, out, *args) -> list[dict]:
    """Runs tests/position_rank.py on ``ranks`` ranks; each rank's result."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
           "--monitor-interval=0.2", os.path.join(REPO, "tests", "position_rank.py"), *map(str, args)]
    job = Job(cmd, out / f"torchrun-{args[0]}-{ranks}.log")
    try:
        assert job.wait(timeout=300) == 0, job.output()[-4000:]
    finally:   # nothing it started outlives the test: the agent, its ranks, their workers
        for pid in [*descendants(job.proc.pid), job.proc.pid]:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        job.proc.wait()
    return [torch.load(out / f"{args[0]}-{ranks}-rank-{r}.pt", weights_only=False) for r in range(ranks)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("elastic-ddp")
    paths = json.dumps(pack_one_class_per_record(root))
    stopped = torchrun(4, root, "stop", paths, root)
    return {"paths": json.loads(paths), "stopped": stopped,
            2: torchrun(2, root, "resume", paths, root, 3, "processes", 1),
            3: torchrun(3, root, "resume", paths, root, 5, "threads", 2)}


def same_samples(a: list, b: list) -> bool:
    return [r for r, _ in a] == [r for r, _ in b] and all(torch.equal(x, y) for (_, x), (_, y) in zip(a, b))


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("world, batch, per_rank", [(2, 3, 16), (3, 5, 11)])
def test_the_rest_of_the_epoch_on_other_ranks_is_each_record_once_with_its_pixels(runs, order, world, batch, per_rank):
    stopped = [rank[order] for rank in runs["stopped"]]
    pixels = dict(sum((rank["whole"] for rank in stopped), []))
    assert len(pixels) == RECORDS
    first = sum((rank["first"] for rank in stopped), [])
    assert len(first) == 4 * 2 * 2 == len({r for r, _ in first})   # 4 ranks, 2 batches of 2: 16 records
    resumed = [rank[order] for rank in runs[world]]
    # 32 left: 16 a rank on 2 ranks; 11 a rank on 3 (33 places: one record twice, as DistributedSampler pads).
    assert [len(rank["rest"]) for rank in resumed] == [per_rank] * world
    assert [rank["left"] for rank in resumed] == [-(-per_rank // batch)] * world
    delivered = first + sum((rank["rest"] for rank in resumed), [])
    records = [r for r, _ in delivered]
    assert sorted(set(records)) == list(range(RECORDS))
    assert len(records) == RECORDS + (world * per_rank - 32)
    for record, image in delivered:
        assert torch.equal(image, pixels[record]), (order, world, record)
    for rank, got in enumerate(resumed):   # epoch 2: what a fresh loader on this topology delivers
        with make_loader(runs["paths"][order], order, batch, rank, world) as fresh:
            fresh.set_epoch(2)
            assert same_samples(got["following"], samples(fresh)), (order, world, rank)


@pytest.mark.parametrize("order", ORDERS)
def test_the_states_of_a_resumed_loader_resume_again_on_another_topology(runs, order):
    """The 2-rank run's states after its first batch (3 records a rank), resumed on 3 ranks of
    batch 4 in this process: 48 - 16 - 6 = 26 left, 9 a rank (one padding)."""
    stopped = [rank[order] for rank in runs["stopped"]]
    pixels = dict(sum((rank["whole"] for rank in stopped), []))
    delivered = sum((rank["first"] for rank in stopped), [])
    delivered += sum((rank[order]["rest"][:3] for rank in runs[2]), [])
    states = runs[2][0][order]["again"]
    assert [s["rank"] for s in states] == [0, 1] and [s["batch"] for s in states] == [1, 1]
    assert states[0]["resumed"] == [{"world_size": 4, "batch_size": 2, "batches": [2, 2, 2, 2]}]
    for rank in range(3):
        with make_loader(runs["paths"][order], order, 4, rank, 3) as loader:
            loader.load_state_dict(states)
            rest = samples(loader)
        assert len(rest) == 9
        delivered += rest
    records = [r for r, _ in delivered]
    assert sorted(set(records)) == list(range(RECORDS)) and len(records) == RECORDS + 1
    assert all(torch.equal(image, pixels[record]) for record, image in delivered)
