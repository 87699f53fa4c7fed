"""Two real DDP ranks (torchrun, gloo) read a bucket: disjoint shards that cover the data set
once per epoch, each rank fetching only its own."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
from test_train_helpers import REPO, subprocess_env

from feedline import FeedLoader
from feedline.core.config import OrderSpec

pytestmark = [pytest.mark.s3, pytest.mark.slow]


def test_two_ranks_read_disjoint_shards_covering_the_data_set(uploaded, s3_env, tmp_path):
    url, local_index = uploaded
    with FeedLoader(local_index, batch_size=8, train=False, size=32, mean=None, num_workers=1, device="cpu",
                    order=OrderSpec("sequential", rank=0, world_size=1)) as loader:
        everything = sorted(hashlib.sha1(image.contiguous().numpy().tobytes()).hexdigest()
                            for images, _ in loader for image in images)
        shard_bytes = {os.path.basename(f): os.path.getsize(f) for f in loader.store.files()}
        assert loader.store.shard_counts() == (12, 12, 12, 12)
    env = subprocess_env()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           "--monitor-interval=0.2", os.path.join(REPO, "tests", "remote_rank.py"), url, str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = [json.load(open(tmp_path / f"rank-{r}.json")) for r in range(2)]
    for epoch in range(2):
        a, b = (ranks[r][epoch] for r in range(2))
        assert a["order"] == "shards"
        assert len(a["hashes"]) == len(b["hashes"]) == len(everything) // 2
        assert not set(a["hashes"]) & set(b["hashes"])
        assert sorted(a["hashes"] + b["hashes"]) == everything
    # 4 shards of 12 records: each rank reads two whole shards, and fetches those two only.
    first = [ranks[r][0]["fetched"] for r in range(2)]
    assert [len(f) for f in first] == [2, 2] and set(first[0] + first[1]) == set(shard_bytes)
