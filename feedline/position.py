"""Where a loader stands, and what a saved position must match to mean the same batches:
``FeedLoader.state_dict`` and ``load_state_dict`` (loader.py)."""
from __future__ import annotations

from dataclasses import dataclass

from .choices import Order
from .config import LoaderConfig

STATE_VERSION = 2
_KNOWN_STATES = (1, 2)  # version 1 said shuffle=True/False where version 2 says order


@dataclass(frozen=True)
class Position:
    """Where a loader stands: batches ``0 .. batch - 1`` of ``epoch`` are delivered."""

    epoch: int = 0
    batch: int = 0


def fingerprint(config: LoaderConfig, samples: int) -> dict:
    """What must match for a saved position to mean the same batches."""
    c = config
    return {"seed": c.seed, "order": c.order.value, "batch_size": c.batch_size, "drop_last": c.drop_last,
            "world_size": c.world_size, "even_shards": c.even_shards, "quasi_random": list(c.quasi_random),
            "samples": samples}


def position_from_state(state: dict, expected: dict) -> Position:
    """The Position a saved loader state holds, once its version and fingerprint check out."""
    version = state.get("version")
    if version not in _KNOWN_STATES:
        raise ValueError(f"cannot resume: the loader state has version {version!r}; this feedline "
                         f"reads versions {', '.join(map(str, _KNOWN_STATES))} (it writes {STATE_VERSION}). "
                         "Resume with the feedline that saved it, or start the epoch afresh")
    if version == 1:  # shuffle: bool where version 2 has order; drop_last and even_shards as now
        state = {**state, "order": (Order.RANDOM if state.get("shuffle") else Order.SEQUENTIAL).value,
                 "drop_last": expected["drop_last"], "even_shards": True,
                 "quasi_random": expected["quasi_random"]}
    for key, value in expected.items():
        if state.get(key) != value:
            raise ValueError(f"cannot resume: the saved loader had {key}={state.get(key)!r}, "
                             f"this one has {value!r}")
    return Position(int(state["epoch"]), int(state["batch"]))
