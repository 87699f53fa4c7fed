"""The loader's seed: given, or drawn from torch's global generator as DataLoader draws its
sampler's and workers' seeds, so that ``torch.manual_seed(1)`` and ``(2)`` give different
batches and the same manual seed the same batches.

Every rank of a sharded epoch must compute the same permutation, else ranks read
overlapping shares and miss others. A drawn seed is therefore rank 0's, broadcast over
torch.distributed (a collective: every rank builds the loader). Ranks told their place
without a process group cannot agree on a draw: a shuffled order needs the seed given; in
sequential order each rank draws its own (only its augmentations depend on it, as each
rank's DataLoader workers draw their own).
"""
from __future__ import annotations

import torch

from ..core.choices import Order


def draw_seed() -> int:
    """A seed from torch's global generator, drawn as DataLoader's RandomSampler draws one:
    a non-negative int64."""
    return int(torch.empty((), dtype=torch.int64).random_().item())


def loader_seed(seed: int | None, world_size: int, order: Order) -> int:
    """``seed`` itself, or for None one drawn here (rank 0's under torch.distributed)."""
    if seed is not None:
        return seed   # LoaderConfig checks it
    dist = torch.distributed
    if world_size > 1 and dist.is_available() and dist.is_initialized() and dist.get_world_size() == world_size:
        return broadcast_from_rank0(draw_seed())
    if world_size > 1 and order is not Order.SEQUENTIAL:
        raise ValueError(f"seed=None draws the seed on each process, but the {world_size} ranks of this "
                         f"loader share no process group to agree on one, and order={order.value!r} needs "
                         "one permutation for all: pass seed= (the same int on every rank)")
    return draw_seed()


def broadcast_from_rank0(value: int) -> int:
    """Rank 0's ``value`` on every rank of the default process group."""
    dist = torch.distributed
    device = torch.device("cpu")
    if dist.get_backend() == "nccl":   # NCCL moves only CUDA tensors
        device = torch.device("cuda", torch.cuda.current_device())
    tensor = torch.tensor([value], dtype=torch.int64, device=device)
    dist.broadcast(tensor, src=0)
    return int(tensor.item())


def saved_seed(state: dict, own: int) -> int:
    """The seed a saved loader state holds, which a loader with a drawn seed takes; ``own``
    when it holds none (the state's check then names the difference)."""
    seed = state.get("seed") if isinstance(state, dict) else None
    return seed if isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0 else own
