"""One rank of the two-rank engine test (run by torchrun, gloo): for each engine, the
batches of epoch 0 whole and of epoch 1 stopped after two batches and resumed from
``state_dict`` in a new loader, saved to OUT/rank-R.pt with what the rank saw of its place."""
from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

from feedline import FeedLoader

OPTIONS = dict(batch_size=4, shuffle=True, train=True, size=32, num_workers=2, device="cpu", seed=7,
               decoder="opencv")


def taken(batches) -> list:
    return [(x.clone(), y.clone()) for x, y in batches]


def epochs(path: str, engine: str) -> dict:
    with FeedLoader(path, engine=engine, **OPTIONS) as loader:
        epoch0 = taken(loader)
        loader.set_epoch(1)
        it = iter(loader)
        first = taken(next(it) for _ in range(2))
        state = loader.state_dict()
        it.close()
    with FeedLoader(path, engine=engine, **OPTIONS) as resumed:
        resumed.load_state_dict(state)
        rest = taken(resumed)
    steps = torch.tensor([len(epoch0), len(first) + len(rest)])
    fewest = steps.clone()
    dist.all_reduce(fewest, op=dist.ReduceOp.MIN)   # every rank as many batches: DDP steps in lockstep
    return {"epoch0": epoch0, "epoch1": first + rest, "in_step": bool(torch.equal(steps, fewest))}


def main(path: str, out: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    result = {engine: epochs(path, engine) for engine in ("threads", "processes")}
    with FeedLoader(path, engine="threads", **{**OPTIONS, "num_workers": "auto"}) as auto:
        result["auto_workers"] = auto.config.num_workers
        result["position"] = (auto.config.rank, auto.config.world_size)
    result["local_world_size"] = os.environ.get("LOCAL_WORLD_SIZE")
    torch.save(result, os.path.join(out, f"rank-{rank}.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
