"""The GPU check's time plan: its stages in order of value, each with a hard cap, the caps
and a reserve summing to the call's budget.

    python .ci/gpu/plan.py --budget-s 270          # prints the table
    python .ci/gpu/plan.py --device-left-s 900     # the budget a call can have, then the table

A device session has 15 minutes of device time in all: the machine's start (up to 4
minutes), every call, and the idle time after each. The core call is sized so that it fits
twice: start + call + an immediate rerun (``check.sh --only-failed``) + the idle time before
the machine goes back stay within 900 s (``worst_case_s``). ``budget_for`` turns what
`status` says is left into the budget of one core call; the call's `timeout_s` is that
budget plus CALL_OVERHEAD_S (Python's start, the summary's last write).

The stages run in the order listed. When the budget is smaller than the nominal sum, the
later stages are cut first (a stage is planned only when at least MIN_CAP_S of its cap
fits), so a short call still does the most valuable work. While the check runs, a stage
never starts with less time left than the caps still planned after it need.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

MIN_CAP_S = 5.0
RESERVE_S = 10.0          # the final summary and results tarball, and a margin
CALL_OVERHEAD_S = 45      # timeout_s = budget + this (interpreter start, last write, transfer back)
START_S = 240             # a fresh machine's start, counted on the device time, at worst
IDLE_S = 30               # a machine stays warm this long after a call, on the device time
SESSION_S = 900           # a session's device time
MAX_BUDGET_S = 270        # the core call: START_S + 2 x (this + CALL_OVERHEAD_S) + IDLE_S <= SESSION_S


@dataclass(frozen=True)
class Stage:
    name: str
    nominal_s: float
    what: str
    cuda: bool = True      # needs a CUDA device: without one it ends "skipped: no CUDA device"
    scaled: bool = True    # the dry run shrinks its cap (a stand-in runs); setup runs for real there

    def cap_s(self, scale: float = 1.0) -> float:
        return self.nominal_s * (scale if self.scaled else 1.0)


CORE = (
    Stage("setup", 15, "wheels received, checked, rebuilt; pip install --no-index --target; imports",
          cuda=False, scaled=False),
    Stage("smoke", 20, "(a) device, imports, one GPU whole decode vs the CPU's; nvImageCodec#55's region "
          "decode in a child"),
    Stage("cuda_tests", 65, "(b) pytest -m 'cuda and not dali', one process per test file, per-test timeouts"),
    Stage("data", 25, "128 photo-like JPEGs per core (2,048 on 16), each packed 8 times: 16,384 records, "
          "the benchmarks' data", cuda=False),
    Stage("loader", 45, "(c) loader_img_s: the default engine (16 worker processes), RRC 224 bf16 "
          "channels_last on CUDA, beside DataLoader + torchvision; its consumer's GIL per image (py-spy)"),
    Stage("prefetch", 15, "(c) prefetch_overlap: the CUDA Finisher's copy hidden behind a step"),
    Stage("gpu_whole_decode", 20, "(d) engine='gpu' on nvImageCodec 0.9.x: whole images decoded on the GPU, "
          "cropped there; vs the default engine"),
    Stage("resnet50", 40, "(e) ResNet-50 bf16 real vs synthetic, 64 steps each (61 timed after warm-up)"),
    Stage("grid_splice", 15, "(g) the grid splice bench: spliced crops vs the original JPEGs"),
)

DALI = (
    Stage("setup", 40, "the DALI wheels rebuilt and installed beside the core ones", cuda=False, scaled=False),
    Stage("smoke", 25, "(a) again, with DALI: import, one GPU region decode and one DALI image_slice in children"),
    Stage("data", 15, "the photos, reused (the machine is still warm)", cuda=False),
    Stage("dali_tests", 60, "pytest -m dali, one process per test file"),
    Stage("dali_decode", 50, "gpu_decode with the DALI row: dali_mixed_img_s"),
)
DALI_BUDGET_S = 200       # the DALI call's budget: its nominal caps and the reserve
RECEIVE_CALL_S = 25       # a call that only carries a bundle (57 MiB) and checks it
DALI_CALLS_S = 2 * RECEIVE_CALL_S + DALI_BUDGET_S + CALL_OVERHEAD_S   # the optional DALI calls, back to back

CALLS = {"core": CORE, "dali": DALI}


def full_budget(stages: tuple[Stage, ...], scale: float = 1.0) -> float:
    """The budget every stage's nominal cap fits in (with ``scale``: the dry run's)."""
    return sum(s.cap_s(scale) for s in stages) + RESERVE_S * scale


def worst_case_s(budget_s: float = MAX_BUDGET_S) -> float:
    """Device seconds of a fresh start, the core call and an immediate rerun, each running to
    its timeout_s, and the idle time before the machine goes back."""
    return START_S + 2 * (budget_s + CALL_OVERHEAD_S) + IDLE_S


def plan(stages: tuple[Stage, ...], budget_s: float, scale: float = 1.0) -> dict[str, float]:
    """Stage name -> cap in seconds, in order; the caps sum to at most ``budget_s - RESERVE_S
    * scale`` (to exactly that when the budget is smaller than the nominal plan). ``scale``
    shrinks the nominal caps of the scaled stages (the dry run's stand-ins)."""
    room = budget_s - RESERVE_S * scale
    if room < MIN_CAP_S * scale:
        raise ValueError(f"a budget of {budget_s:.0f} s leaves no room for any stage "
                         f"(at least {RESERVE_S * scale + MIN_CAP_S * scale:.0f} s)")
    caps: dict[str, float] = {}
    for stage in stages:
        cap = min(stage.cap_s(scale), room)
        if cap < MIN_CAP_S * scale:
            break
        caps[stage.name] = round(cap, 3)
        room -= cap
    return caps


def budget_for(device_left_s: float, warm: bool = False, room_for_dali: bool = False) -> int:
    """The core call's budget from the device time `status` says is left: the start of a
    machine (unless one is warm) and the call's overhead come off first, and with
    ``room_for_dali`` what the optional DALI calls need after it; at most MAX_BUDGET_S."""
    left = device_left_s - (0 if warm else START_S) - CALL_OVERHEAD_S - (DALI_CALLS_S if room_for_dali else 0)
    return int(max(0, min(MAX_BUDGET_S, left)))


def dali_budget_for(device_left_s: float) -> int:
    """The DALI call's budget, on the warm machine, after its two carrying calls."""
    return int(max(0, min(DALI_BUDGET_S, device_left_s - 2 * RECEIVE_CALL_S - CALL_OVERHEAD_S)))


def stage_named(call: str, name: str) -> Stage:
    return next(s for s in CALLS[call] if s.name == name)


def cap_now(caps: dict[str, float], name: str, left_s: float, scale: float = 1.0,
            skipped: tuple[str, ...] = ()) -> tuple[float, str | None]:
    """Stage ``name``'s cap when it starts with ``left_s`` of the budget left (the reserve
    already off), and why it does not run (None: it runs). The stages planned after it keep
    their caps, except those in ``skipped`` (not run in this call: --only-failed)."""
    names = list(caps)
    later = sum(caps[n] for n in names[names.index(name) + 1:] if n not in skipped)
    cap = min(caps[name], left_s - later)
    if cap < MIN_CAP_S * scale:
        return cap, f"out of time: {max(cap, 0):.0f} s left for it"
    return cap, None


def table(stages: tuple[Stage, ...], caps: dict[str, float], budget_s: float) -> str:
    lines = [f"budget {budget_s:.0f} s:"]
    for stage in stages:
        cap = caps.get(stage.name)
        shown = "not planned (budget)" if cap is None else f"{cap:6.1f} s"
        lines.append(f"  {stage.name:16} {shown:>8}  {stage.what}")
    lines.append(f"  {'(reserve)':16} {budget_s - sum(caps.values()):6.1f} s  the last summary write and a margin")
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
    if a.call == "core":
        print(f"worst case, start + call + rerun + idle: {START_S} + 2 x {budget + CALL_OVERHEAD_S:.0f} + {IDLE_S} "
              f"= {worst_case_s(budget):.0f} s of device time")
    try:
        print(table(CALLS[a.call], plan(CALLS[a.call], budget), budget))
    except ValueError as exc:
        print(f"plan: {exc}: not enough device time for this call")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
