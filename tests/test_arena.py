"""sources/arena.py: a Slot's memory. Shared, it is a memfd a second mapping (as a worker
process makes from the descriptor it receives) sees written; private, it has no descriptor."""
from __future__ import annotations

import os

import numpy as np

from feedline.sources.arena import Arena, attach


def test_a_shared_arena_is_seen_through_a_second_mapping():
    arena = Arena(4096)
    theirs = np.frombuffer(attach(os.dup(arena.fd), 4096), dtype=np.uint8)   # as a worker maps it
    mine = np.frombuffer(arena.memory, dtype=np.uint8)
    theirs[100:200] = 7
    assert (mine[100:200] == 7).all() and not mine[:100].any()
    assert os.readlink(f"/proc/self/fd/{arena.fd}").startswith("/memfd:feedline-slot")


def test_closing_the_descriptor_keeps_the_memory():
    arena = Arena(8192)
    fd = arena.fd
    arena.close_fd()
    arena.close_fd()   # twice: nothing more to close
    assert arena.fd is None and not os.path.exists(f"/proc/self/fd/{fd}")
    memory = np.frombuffer(arena.memory, dtype=np.uint8)
    memory[:] = 3
    assert memory.sum() == 3 * 8192


def test_a_private_arena_has_no_descriptor():
    arena = Arena(3 << 20, shared=False)
    assert arena.fd is None and len(arena.memory) == 3 << 20
    np.frombuffer(arena.memory, dtype=np.uint8)[:] = 1
