"""Process groups from torchrun's environment: NCCL on GPUs, gloo on CPUs. DDP, never
DataParallel: one process per GPU has no GIL contention and no scatter/gather on one device."""
from __future__ import annotations

import datetime
import gc
import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .config import TrainError


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None
    device: torch.device = torch.device("cpu")
    owns_group: bool = False    # this run created the process group and destroys it

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    value = env.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise TrainError(f"environment variable {name}={value!r} is not a number; "
                         "start several processes with torchrun") from None


def choose_device(requested: str, local_rank: int) -> torch.device:
    """``auto``: this process's GPU when CUDA is usable, else the CPU."""
    if requested == "cpu":
        return torch.device("cpu")
    if requested == "auto" and not torch.cuda.is_available():
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise TrainError(f"--device {requested}: CUDA is not available here; use --device cpu")
    if requested.startswith("cuda:"):
        return torch.device(requested)
    return torch.device("cuda", local_rank % torch.cuda.device_count())


def init(requested_device: str = "auto", env: Mapping[str, str] | None = None,
         timeout_s: float = 300.0) -> DistInfo:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR);
    a single process when WORLD_SIZE is absent or 1. A collective that waits longer than
    ``timeout_s`` for a rank fails (gloo: at once; NCCL: through its watchdog), so a dead
    or hung rank ends the job instead of hanging it."""
    env = os.environ if env is None else env
    world_size = _env_int(env, "WORLD_SIZE", 1)
    rank = _env_int(env, "RANK", 0)
    local_rank = _env_int(env, "LOCAL_RANK", 0)
    device = choose_device(requested_device, local_rank)
    if world_size <= 1:
        return DistInfo(device=device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    owns = not dist.is_initialized()
    if owns:
        kwargs = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout_s), **kwargs)
    return DistInfo(rank=rank, world_size=world_size, local_rank=local_rank, backend=backend,
                    device=device, owns_group=owns)


def cleanup(info: DistInfo) -> None:
    """Destroy the process group if this run created it (a caller's own group stays).

    DDP models must be gone first: a DDP Reducer still alive when the group is destroyed
    makes the process abort at exit now and then ("terminate called without an active
    exception", SIGABRT after a successful run; about 1 run in 5 with torch 2.13 and gloo,
    none in 20 once the Reducer is collected first). DDP holds reference cycles, hence
    the collection."""
    if info.owns_group and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def all_reduce_sum(tensor: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def sum_over_ranks(values: list[float], info: DistInfo) -> list[float]:
    """``values`` summed elementwise over ranks, in float64 (themselves in one process)."""
    if not info.distributed:
        return [float(v) for v in values]
    t = torch.tensor(values, dtype=torch.float64, device=info.device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def broadcast_buffers(model: torch.nn.Module, info: DistInfo) -> None:
    """Rank 0's buffers (BatchNorm running statistics) on every rank. DDP copies them at the
    start of each forward, so after the last training step each rank holds its own; this makes
    every rank evaluate the model rank 0 saves."""
    if info.distributed:
        for buffer in model.buffers():
            dist.broadcast(buffer, src=0)


def gather_ints(values: list[int], info: DistInfo) -> list[list[int]]:
    """Every rank's ``values``, in rank order (a list with one entry in a single process)."""
    if not info.distributed:
        return [list(values)]
    t = torch.tensor(values, dtype=torch.int64, device=info.device)
    out = [torch.empty_like(t) for _ in range(info.world_size)]
    dist.all_gather(out, t)
    return [o.tolist() for o in out]


def gather_objects(value, info: DistInfo) -> list:
    """Every rank's ``value`` (any picklable object), in rank order (``[value]`` in a single process)."""
    if not info.distributed:
        return [value]
    out = [None] * info.world_size
    dist.all_gather_object(out, value)
    return out


def parameters_in_sync(model: torch.nn.Module, info: DistInfo) -> bool:
    """True when every rank holds exactly the same parameters: the elementwise max over
    ranks equals the elementwise min. Two all-reduces of the model size; for the end of a run."""
    if not info.distributed:
        return True
    flat = torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])
    hi, lo = flat.clone(), flat.clone()
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    return bool(torch.equal(hi, lo))
