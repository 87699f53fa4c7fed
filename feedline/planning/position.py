"""Where a loader stands, what a saved position must match to mean the same batches, and
how the states of every rank resume an epoch on another topology: ``FeedLoader.state_dict``
and ``load_state_dict`` (loader.py).

One rank's state resumes on the same world size and batch size, exactly where that rank
stood. The list of every rank's states resumes on any world size, batch size or worker
count: the ranks' delivered batches become a Segment of the epoch, and the epoch's plan
(plan.EpochPlan.samples) deals the records no rank delivered to the new ranks, each record
keeping the crop, flip and transform parameters of (seed, epoch, index).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core.choices import Order
from ..core.config import LoaderConfig
from .plan import Segment
from .seeds import saved_seed

STATE_VERSION = 3
# 1 said shuffle=True/False where 2 says order; 3 adds the rank and the segments of the
# epoch delivered on other topologies.
_KNOWN_STATES = (1, 2, 3)
TOPOLOGY = ("world_size", "batch_size")   # what a list of every rank's states may change
HOW = ("gather every rank's state_dict() (torch.distributed.all_gather_object) from the same step and pass "
       "the whole list, or pass one rank's state on the same world_size and batch_size")


@dataclass(frozen=True)
class Position:
    """Where a loader stands: batches ``0 .. batch - 1`` of ``epoch`` are delivered (after
    the ``resumed`` segments of that epoch, delivered on other topologies)."""

    epoch: int = 0
    batch: int = 0
    resumed: tuple[Segment, ...] = ()


def fingerprint(config: LoaderConfig, samples: int) -> dict:
    """What must match for a saved position to mean the same batches."""
    c = config
    return {"seed": c.seed, "order": c.order.value, "batch_size": c.batch_size, "drop_last": c.drop_last,
            "world_size": c.world_size, "even_shards": c.even_shards, "quasi_random": list(c.quasi_random),
            "samples": samples}


def state_of(config: LoaderConfig, samples: int, position: Position) -> dict:
    """The saved form of ``position``: plain numbers, strings and lists."""
    return {"version": STATE_VERSION, "epoch": position.epoch, "batch": position.batch, "rank": config.rank,
            **fingerprint(config, samples),
            "resumed": [{"world_size": s.world_size, "batch_size": s.batch_size, "batches": list(s.batches)}
                        for s in position.resumed]}


def resume_position(state: dict | list[dict], config: LoaderConfig, samples: int,
                    seed_drawn: bool) -> tuple[Position, int]:
    """The position ``state`` resumes, and the seed it needs: a drawn seed gives way to the saved one."""
    first = state[0] if isinstance(state, (list, tuple)) and state else state
    seed = saved_seed(first, config.seed) if seed_drawn else config.seed
    return position_from_state(state, {**fingerprint(config, samples), "seed": seed}), seed


def position_from_state(state: dict | list[dict], expected: dict) -> Position:
    """The Position a saved loader state holds (one rank's, on this topology), or that the
    list of every rank's states resumes on this one, once versions and fingerprints check out."""
    if isinstance(state, (list, tuple)):
        return position_from_states(list(state), expected)
    state = upgraded(state, expected)
    mismatch(state, expected)
    return Position(int(state["epoch"]), int(state["batch"]), segments(state))


def position_from_states(states: list[dict], expected: dict) -> Position:
    """Every rank's state, gathered: the segment they delivered joins the epoch's resumed
    ones, and this loader deals what is left. On the same topology with every rank at the
    same batch, the position is the ranks' own (an exact continuation)."""
    states = [upgraded(s, expected) for s in states]
    if not states:
        raise ValueError(f"cannot resume from an empty list of loader states: {HOW}")
    if any(s["version"] < 3 for s in states):
        raise ValueError("cannot resume on another topology from loader states of version 1 or 2 (they do not "
                         "say their rank): pass one rank's state on the same world_size and batch_size")
    first = states[0]
    for key in ("epoch", "resumed", *expected):
        values = sorted({repr(s.get(key)) for s in states})
        if len(values) > 1:
            raise ValueError(f"cannot resume: the loader states disagree on {key} ({', '.join(values)}): they "
                             f"are not from one step of one run; {HOW}")
    world = first["world_size"]
    ranks = [s.get("rank") for s in states]
    missing = [r for r in range(world) if r not in ranks]
    twice = sorted({r for r in ranks if ranks.count(r) > 1}, key=repr)
    alien = sorted({r for r in ranks if r not in range(world)}, key=repr)
    if missing or twice or alien:
        what = [f"missing rank(s) {', '.join(map(str, missing))}" if missing else "",
                f"rank(s) {', '.join(map(str, twice))} given twice" if twice else "",
                f"rank(s) {', '.join(map(repr, alien))} not in 0..{world - 1}" if alien else ""]
        raise ValueError(f"cannot resume: {len(states)} loader states for a world_size of {world}: "
                         f"{'; '.join(w for w in what if w)}; {HOW}")
    mismatch(first, {k: v for k, v in expected.items() if k not in TOPOLOGY})
    batches = tuple(count(s["batch"], "batch") for s in sorted(states, key=lambda s: s["rank"]))
    epoch, resumed = int(first["epoch"]), segments(first)
    same_topology = all(first[k] == expected[k] for k in TOPOLOGY)
    if not any(batches) or (same_topology and len(set(batches)) == 1):
        return Position(epoch, batches[0], resumed)
    return Position(epoch, 0, resumed + (Segment(world, first["batch_size"], batches),))


def upgraded(state, expected: dict) -> dict:
    """``state`` in version 3's keys; a ValueError for what is not a loader state or has a
    version this feedline does not know."""
    if not isinstance(state, dict):
        raise TypeError(f"a loader state is the dict state_dict() returned (or a list of every rank's), "
                        f"got {type(state).__name__}")
    version = state.get("version")
    if version not in _KNOWN_STATES:
        raise ValueError(f"cannot resume: the loader state has version {version!r}; this feedline "
                         f"reads versions {', '.join(map(str, _KNOWN_STATES))} (it writes {STATE_VERSION}). "
                         "Resume with the feedline that saved it, or start the epoch afresh")
    if version == 1:  # shuffle: bool where version 2 has order; drop_last and even_shards as now
        state = {**state, "order": (Order.RANDOM if state.get("shuffle") else Order.SEQUENTIAL).value,
                 "drop_last": expected["drop_last"], "even_shards": True,
                 "quasi_random": expected["quasi_random"]}
    return state if version == 3 else {**state, "resumed": []}


def mismatch(state: dict, expected: dict) -> None:
    """A ValueError naming the first of ``expected``'s values that ``state`` does not hold."""
    for key, value in expected.items():
        if state.get(key) != value:
            raise ValueError(f"cannot resume: the saved loader had {key}={state.get(key)!r}, "
                             f"this one has {value!r}")


def segments(state: dict) -> tuple[Segment, ...]:
    """The segments of the epoch a version-3 state says were delivered on other topologies."""
    try:
        found = tuple(Segment(count(s["world_size"], "world_size", 1), count(s["batch_size"], "batch_size", 1),
                              tuple(count(b, "batches") for b in s["batches"])) for s in state["resumed"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"cannot resume: the loader state's 'resumed' is damaged ({exc!r}): each entry "
                         "needs world_size, batch_size and batches; save it again with state_dict()") from None
    for s in found:
        if len(s.batches) != s.world_size:
            raise ValueError(f"cannot resume: a resumed segment of the loader state has {len(s.batches)} ranks' "
                             f"batches for a world_size of {s.world_size}; save it again with state_dict()")
    return found


def count(value, name: str, least: int = 0) -> int:
    """``value`` as an int of at least ``least``; a ValueError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"cannot resume: the loader state's {name} is {value!r}, not an int >= {least}")
    return value
