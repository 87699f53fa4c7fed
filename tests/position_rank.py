"""One rank of the elastic-resume DDP test (run by torchrun, gloo), for each order:

- ``stop PATHS OUT``: epoch 1 whole (the uninterrupted reference), then epoch 1 again stopped
  after 2 batches of 2; every rank's state gathered (all_gather_object) into OUT/states-ORDER.pt;
- ``resume PATHS OUT BATCH ENGINE WORKERS``: every rank's states loaded on this world size,
  the rest of epoch 1 (its first batch's gathered states saved too), then epoch 2.

What the rank delivered, as (record, pixels), goes to OUT/MODE-WORLD-rank-R.pt.
"""
from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

from position_helpers import ORDERS, make_loader, samples, taken


def gathered(state: dict) -> list[dict]:
    states = [None] * dist.get_world_size()
    dist.all_gather_object(states, state)
    return states


def stop(path: str, order: str, out: str) -> dict:
    with make_loader(path, order, 2, num_workers=2) as loader:
        loader.set_epoch(1)
        whole = samples(loader)
        loader.set_epoch(1)
        first, state = taken(loader, 2)
    states = gathered(state)
    if dist.get_rank() == 0:
        torch.save(states, os.path.join(out, f"states-{order}.pt"))
    return {"whole": whole, "first": first}


def resume(path: str, order: str, out: str, batch: int, engine: str, workers: int) -> dict:
    states = torch.load(os.path.join(out, f"states-{order}.pt"), weights_only=True)
    with make_loader(path, order, batch, engine=engine, num_workers=workers) as loader:
        loader.load_state_dict(states)
        loader.set_epoch(1)
        left = loader.batches_left()
        it = iter(loader)
        rest = samples([next(it)])
        again = gathered(loader.state_dict())   # a resumed loader's states, for a resume after this one
        rest += samples(it)
        following = samples(loader)             # epoch 2
    return {"rest": rest, "left": left, "again": again, "following": following}


def main(mode: str, paths: str, out: str, *args: str) -> None:
    dist.init_process_group("gloo")
    paths = json.loads(paths)
    if mode == "stop":
        result = {order: stop(paths[order], order, out) for order in ORDERS}
    else:
        batch, engine, workers = int(args[0]), args[1], int(args[2])
        result = {order: resume(paths[order], order, out, batch, engine, workers) for order in ORDERS}
    torch.save(result, os.path.join(out, f"{mode}-{dist.get_world_size()}-rank-{dist.get_rank()}.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
