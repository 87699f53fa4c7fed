"""Two machines: `feedline train` on two torchrun "nodes" on localhost (c10d rendezvous, gloo
on the CPU, one process each), each reading a per-machine copy of a store packed with
``--num-shards 2``, each rank only its share of the epoch's order.

Each node's copy is damaged in every record the other rank reads: a bad checksum there.
Training runs with ``--on-error raise``, so a rank that read one record outside its share
(a wrong rank or world size, shares that overlap, a read of a whole shard) fails the
run; the run succeeding shows the shares are what the order says, and disjoint.
"""
from __future__ import annotations

import os
import shutil
import time

import pytest
from test_train_helpers import FAST, Job, free_port, summary, torchrun

from converters import pack
from feedline import open_dataset
from feedline.planning.augment import AugmentSpec
from feedline.core.choices import Order
from feedline.core.errors import ChecksumError
from feedline.planning.plan import EpochPlan
from feedline.sample import make_photo_folder

pytestmark = pytest.mark.slow

N, BATCH, SEED = 40, 4, 5


def share(rank: int) -> set[int]:
    """The records rank ``rank`` of 2 reads in epoch 0 of the trainer's loader (random order,
    the trainer's seed, drop_last: whole batches only)."""
    plan = EpochPlan(AugmentSpec(size=32, train=True), SEED, 0, Order.RANDOM, BATCH, True, rank, 2)
    samples = plan.samples(N)
    return set(samples[:plan.count(N) * BATCH].tolist())


def damage_all_but(index: str, keep: set[int]) -> None:
    """Flip bytes inside every record of the set at ``index`` that is not in ``keep``."""
    with open_dataset(index) as store:
        places = {i: store.byte_ranges(i, i + 1)[0] for i in range(len(store)) if i not in keep}
    for path, offset, length in places.values():
        with open(path, "r+b") as fh:
            fh.seek(offset + length // 2)
            data = fh.read(8)
            fh.seek(offset + length // 2)
            fh.write(bytes(b ^ 0xFF for b in data))


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    """Two per-machine copies of one sharded pack, node k's damaged outside rank k's share."""
    root = tmp_path_factory.mktemp("nodes")
    make_photo_folder(str(root / "src"), n=N, classes=4, seed=2, sizes=[(96, 72), (72, 96), (80, 80)])
    pack(str(root / "src"), str(root / "packed" / "train.lmdb"), num_shards=2)
    shares = [share(0), share(1)]
    assert not shares[0] & shares[1] and len(shares[0]) == len(shares[1]) == N // 2
    indexes = []
    for k in (0, 1):
        shutil.copytree(root / "packed", root / f"node{k}")
        index = str(root / f"node{k}" / "train.shards.json")
        damage_all_but(index, shares[k])
        indexes.append(index)
    with open_dataset(indexes[1]) as store:   # the damage is there to be found
        assert len(store.files()) == 2
        with pytest.raises(ChecksumError):
            store.read_checked(min(shares[0]))
        store.read_checked(min(shares[1]))
    return indexes


def test_two_nodes_each_read_only_their_share_of_per_machine_shards(copies, tmp_path):
    out = tmp_path / "run"
    port = free_port()
    nodes = []
    for rank in (0, 1):   # node 0 first: it hosts the rendezvous store, as the endpoint's machine does
        args = [copies[rank], *FAST, "--batch-size", str(BATCH), "--epochs", "1", "--seed", str(SEED),
                "--on-error", "raise", "--synthetic-steps", "0", "--out", out if rank == 0 else tmp_path / "run1"]
        nodes.append(Job(torchrun(*args, nproc=1, nnodes=2, node_rank=rank, port=port), tmp_path / f"node{rank}.log"))
        time.sleep(2 if rank == 0 else 0)
    codes = [node.wait(120) for node in nodes]
    assert codes == [0, 0], "\n".join(node.output()[-3000:] for node in nodes)
    result = summary(out)
    assert result["steps_per_rank"] == [N // 2 // BATCH] * 2 and result["ranks_in_sync"] is True
    assert result["bad_records"] == 0
