"""The GPU check's time plan: its stages in order of value, each with a hard cap, the caps
summing to the call's budget.

    python .ci/gpu/plan.py --budget-s 470          # prints the table
    python .ci/gpu/plan.py --device-left-s 840     # the budget a call can have, then the table

A device session has 15 minutes of device time in all: the machine's start (1-3 min),
every call, and the idle time between calls. ``budget_for`` turns what `status` says is
left into the budget of the one core call; the call's `timeout_s` is that budget plus
CALL_OVERHEAD_S (Python's start, the summary's last write).

Each stage's cap is its nominal seconds; the stages run in the order listed, the last one
("rest") gets whatever the others left. When the budget is smaller than the nominal sum,
the later stages are cut first (a stage is planned only when at least MIN_CAP_S of its cap
fits), so a short call still does the most valuable work. While the check runs, a stage
never starts with less time left than the caps still planned after it need: a stage that
finishes early gives its time to the ones that take spare time: a ``spare`` stage costs
nothing in the plan and runs only in what the earlier stages left (at least its
``spare_min_s``, at most its nominal seconds), then "rest" gets the remainder.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

REST = "rest"
MIN_CAP_S = 5.0
RESERVE_S = 10.0          # the final summary and results tarball, and a margin
CALL_OVERHEAD_S = 45      # timeout_s = budget + this (interpreter start, last write, transfer back)
START_S = 180             # a fresh machine's start, counted on the device time, at worst
MAX_BUDGET_S = 470        # the core call: at most 8 minutes, its start and last write included


@dataclass(frozen=True)
class Stage:
    name: str
    nominal_s: float       # REST: whatever is left
    what: str
    gpu: bool = True       # replaced by a stand-in in the dry run, its cap scaled there; setup runs for real
    spare_min_s: float = 0  # > 0: a spare stage, run in time earlier stages left unused, if at least this much

    def cap_s(self, scale: float = 1.0) -> float:
        return self.nominal_s * (scale if self.gpu else 1.0)

    @property
    def spare(self) -> bool:
        return self.spare_min_s > 0


CORE = (
    Stage("setup", 30, "wheels received, checked, rebuilt; pip install --no-index --target; imports", gpu=False),
    Stage("smoke", 30, "(a) device, imports, one GPU full decode vs the CPU's, one GPU region decode in a child"),
    Stage("cuda_tests", 95, "(b) pytest -m cuda, one process per test file, per-test timeouts"),
    Stage("data", 50, "4,096 photo-like JPEGs on all cores, packed to LMDB: the benchmarks' data"),
    Stage("loader", 60, "(c) loader_img_s on CUDA (RRC 224, bf16 channels_last): 16 threads, 16 worker "
          "processes and their GIL per image (py-spy)"),
    Stage("prefetch", 25, "(c) prefetch_overlap: the CUDA Finisher's copy hidden behind a step"),
    Stage("gpu_decode", 45, "(d) engine='gpu' (nvImageCodec) vs the CPU threads"),
    Stage("resnet50", 60, "(e) ResNet-50 bf16, real vs synthetic data, short"),
    Stage("ddp", 40, "(f) torchrun + NCCL, world size = GPU count; feedline train under torchrun"),
    Stage("grid_splice", 25, "(g) the grid splice bench: spliced crops vs region decode"),
    Stage("scaling", 75, "bench/scaling.py's worker-engine rows on 16 cores: GIL per image per process",
          spare_min_s=25),
    Stage(REST, 0, "pytest -m 'not cuda' with CUDA hidden (CUDA_VISIBLE_DEVICES=''), in whatever time is left"),
)

DALI = (
    Stage("setup", 40, "the DALI wheels rebuilt and installed beside the core ones", gpu=False),
    Stage("smoke", 25, "(a) again, with DALI: import, one GPU region decode and one DALI image_slice in children"),
    Stage("data", 15, "the photos, reused (the machine is still warm)"),
    Stage("dali_tests", 60, "pytest -m dali, one process per test file"),
    Stage("dali_decode", 50, "gpu_decode with the DALI row: dali_mixed_img_s"),
    Stage(REST, 0, "nothing: the summary"),
)
DALI_BUDGET_S = 200       # the DALI call's budget: its nominal caps and the reserve
RECEIVE_CALL_S = 25       # a call that only carries a bundle (57 MiB) and checks it
DALI_CALLS_S = 2 * RECEIVE_CALL_S + DALI_BUDGET_S + CALL_OVERHEAD_S   # the optional DALI calls, back to back

CALLS = {"core": CORE, "dali": DALI}


def full_budget(stages: tuple[Stage, ...], scale: float = 1.0) -> float:
    """The budget every stage's nominal cap fits in (with ``scale``: the dry run's); the
    spare stages are not counted."""
    return sum(s.cap_s(scale) for s in stages if not s.spare) + RESERVE_S * scale


def plan(stages: tuple[Stage, ...], budget_s: float, scale: float = 1.0) -> dict[str, float]:
    """Stage name -> cap in seconds, in order; the caps sum to ``budget_s - RESERVE_S * scale``.
    ``scale`` shrinks the nominal caps of the stages that need a GPU (the dry run's stand-ins).
    A spare stage is planned at 0 s (its time is what the earlier stages leave, at run time),
    and only when every stage before it was planned."""
    room = budget_s - RESERVE_S * scale
    if room < MIN_CAP_S * scale:
        raise ValueError(f"a budget of {budget_s:.0f} s leaves no room for any stage "
                         f"(at least {RESERVE_S * scale + MIN_CAP_S * scale:.0f} s)")
    caps: dict[str, float] = {}
    for stage in stages:
        if stage.name == REST:
            break
        if stage.spare:
            caps[stage.name] = 0.0
            continue
        cap = min(stage.cap_s(scale), room)
        if cap < MIN_CAP_S * scale:
            break
        caps[stage.name] = round(cap, 3)
        room -= cap
    caps[REST] = round(max(room, 0.0), 3)
    return caps


def budget_for(device_left_s: float, warm: bool = False, room_for_dali: bool = False) -> int:
    """The core call's budget from the device time `status` says is left: the start of a
    machine (unless one is warm) and the call's overhead come off first, and with
    ``room_for_dali`` what the optional DALI calls need after it; at most 8 minutes."""
    left = device_left_s - (0 if warm else START_S) - CALL_OVERHEAD_S - (DALI_CALLS_S if room_for_dali else 0)
    return int(max(0, min(MAX_BUDGET_S, left)))


def dali_budget_for(device_left_s: float) -> int:
    """The DALI call's budget, on the warm machine, after its two carrying calls."""
    return int(max(0, min(DALI_BUDGET_S, device_left_s - 2 * RECEIVE_CALL_S - CALL_OVERHEAD_S)))


def stage_named(call: str, name: str) -> Stage:
    return next(s for s in CALLS[call] if s.name == name)


def cap_now(call: str, caps: dict[str, float], name: str, left_s: float,
            scale: float = 1.0) -> tuple[float, str | None]:
    """Stage ``name``'s cap when it starts with ``left_s`` of the budget left (the reserve
    already off), and why it does not run (None: it runs). The stages planned after it keep
    their caps; "rest" gets all that is left; a spare stage what the others left, up to its
    nominal seconds, and it runs only with at least its ``spare_min_s``."""
    names = list(caps)
    later = sum(caps[n] for n in names[names.index(name) + 1:] if n != REST)
    stage = stage_named(call, name)
    if name == REST:
        cap = left_s
    else:
        cap = min(stage.cap_s(scale) if stage.spare else caps[name], left_s - later)
    if stage.spare and cap < stage.spare_min_s * scale:
        return cap, (f"no spare time: {max(cap, 0):.0f} s left by the earlier stages, "
                     f"{stage.spare_min_s * scale:.0f} s needed")
    if cap < MIN_CAP_S * scale:
        return cap, f"out of time: {max(cap, 0):.0f} s left for it"
    return cap, None


def table(stages: tuple[Stage, ...], caps: dict[str, float], budget_s: float) -> str:
    lines = [f"budget {budget_s:.0f} s:"]
    for stage in stages:
        cap = caps.get(stage.name)
        shown = "not planned (budget)" if cap is None else f"{cap:6.1f} s"
        if cap is not None and stage.spare:
            shown = f"spare time, {stage.spare_min_s:.0f}-{stage.nominal_s:.0f} s"
        lines.append(f"  {stage.name:12} {shown:>8}  {stage.what}")
    lines.append(f"  {'(reserve)':12} {budget_s - sum(caps.values()):6.1f} s  the last summary write and a margin")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget-s", type=float)
    p.add_argument("--device-left-s", type=float, help="status's budget_left_s: prints the budget a core call gets")
    p.add_argument("--warm", action="store_true", help="a machine is already warm (no start to pay)")
    p.add_argument("--room-for-dali", action="store_true", help="leave the optional DALI calls their time")
    p.add_argument("--call", choices=sorted(CALLS), default="core")
    a = p.parse_args(argv)
    if a.budget_s is not None:
        budget = a.budget_s
    elif a.device_left_s is None:
        budget = MAX_BUDGET_S if a.call == "core" else DALI_BUDGET_S
    elif a.call == "dali":
        budget = dali_budget_for(a.device_left_s)
    else:
        budget = budget_for(a.device_left_s, a.warm, a.room_for_dali)
    if a.device_left_s is not None:
        print(f"device time left {a.device_left_s:.0f} s -> --budget-s {budget:.0f}, "
              f"timeout_s {budget + CALL_OVERHEAD_S:.0f}")
    try:
        print(table(CALLS[a.call], plan(CALLS[a.call], budget), budget))
    except ValueError as exc:
        print(f"plan: {exc}: not enough device time for this call")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
