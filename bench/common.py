"""What every benchmark shares: timing, ratios that add up, targets, tables and JSON.

A result file is one JSON object: ``benchmark`` (its name), ``created`` (UTC, ISO 8601),
``machine`` (see `bench.machine`), ``params`` (what was asked), ``results`` (a list of
flat rows, one per measured thing) and whatever else the benchmark adds (``targets``).

Ratios printed next to rates are the quotient of the medians printed beside them
(`ratio`), so a reader can check every table by hand.

Where results go (`results_path`): bench/results/NAME.json, the committed results the
README quotes, only when asked (``--save``, or ``--out PATH``); a full run otherwise
writes bench/results/local/NAME.json and a ``--quick`` run bench/results/quick/NAME.json,
both ignored by git. A quick run measures too little to judge a speed: its targets are
written and printed as not judged.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, Sequence

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
LOCAL_DIR = RESULTS_DIR / "local"    # full runs not --save'd (git ignores it)
QUICK_DIR = RESULTS_DIR / "quick"    # --quick runs (git ignores it)
SAVE_HELP = ("write bench/results/NAME.json, the committed results (default: bench/results/local/, "
             "or bench/results/quick/ with --quick, which git ignores)")
# The one refusal: bench.args.check_output_flags says it before a run, results_path guards callers
QUICK_SAVE_REFUSED = "--save keeps full runs only: a --quick run measures too little to keep"


class MeasurementError(RuntimeError):
    """A measurement that cannot be right; the script says so in one line and writes nothing."""


# -- timing --------------------------------------------------------------------------
@dataclass(frozen=True)
class Spread:
    """The min, median and max of repeated measurements."""

    min: float
    median: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> "Spread":
        if not values:
            raise ValueError("no measurements")
        return cls(min(values), statistics.median(values), max(values))

    def to_dict(self) -> dict:
        return {"min": self.min, "median": self.median, "max": self.max}


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def rates(count: float, seconds: Sequence[float]) -> Spread:
    """Items per second for ``count`` items done in each of ``seconds``."""
    return Spread.of([count / max(s, 1e-12) for s in seconds])


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator as the table prints them (`printed`), so that a reader who
    divides the two printed medians finds the printed ratio; None when either is missing."""
    if numerator is None or denominator is None or not printed(denominator):
        return None
    return printed(numerator) / printed(denominator)


# -- native libraries that print on stderr -------------------------------------------
@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """File descriptor 2 pointed at /dev/null: nvImageCodec prints, from C, that the
    nvJPEG2000 and nvTIFF plug-ins are missing, which does not concern JPEG decoding."""
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


# -- targets -------------------------------------------------------------------------
def target(check: str, measured: float | None, needed: float, at_least: bool = True, unit: str = "x") -> dict:
    """One target row: what is checked, the measured value, the bound and pass/fail
    (None when it could not be measured)."""
    passed = None if measured is None else (measured >= needed if at_least else measured <= needed)
    return {"check": check, "measured": measured, "target": f"{'>=' if at_least else '<='} {needed}{unit}",
            "passed": passed}


def unjudged(targets: Sequence[dict]) -> list[dict]:
    """The targets of a --quick run: measured, but neither passed nor failed."""
    return [dict(t, passed=None, judged=False) for t in targets]


def targets_table(targets: Sequence[dict], quick: bool = False) -> str:
    """The targets as a table, then one line naming the ones missed (or not measured);
    for a --quick run, none is judged."""
    if quick:
        shown = [dict(t, result="not judged") for t in targets]
        return "\n".join([format_table(shown, [("target", "check"), ("measured", "measured"), ("needed", "target"),
                                               ("result", "result")]),
                          "targets not judged: a --quick run measures too little to judge a speed"])
    shown = [dict(t, result={True: "pass", False: "FAIL", None: "not measured"}[t["passed"]]) for t in targets]
    lines = [format_table(shown, [("target", "check"), ("measured", "measured"), ("needed", "target"),
                                  ("result", "result")])]
    missed = [t["check"] for t in targets if t["passed"] is False]
    unmeasured = [t["check"] for t in targets if t["passed"] is None]
    lines.append("targets missed: " + ("; ".join(missed) if missed else "none"))
    if unmeasured:
        lines.append("not measured: " + "; ".join(unmeasured))
    return "\n".join(lines)


# -- output --------------------------------------------------------------------------
def results_path(name: str, out: str | os.PathLike | None = None, *, quick: bool = False,
                 save: bool = False) -> Path:
    """Where a benchmark's JSON goes: ``out`` if given; else bench/results/quick/NAME.json for
    a quick run, bench/results/NAME.json (the committed results) with ``save``, and
    bench/results/local/NAME.json otherwise."""
    if out is not None:
        return Path(out)
    if quick and save:
        raise ValueError(QUICK_SAVE_REFUSED)
    if quick:
        return QUICK_DIR / f"{name}.json"
    return (RESULTS_DIR if save else LOCAL_DIR) / f"{name}.json"


def write_results(name: str, results: list[dict], params: dict | None = None,
                  out: str | os.PathLike | None = None, machine: dict | None = None,
                  *, quick: bool = False, save: bool = False, **extra) -> Path:
    """Write the JSON of a benchmark (see the module docstring); returns its path. A quick
    run's ``targets`` are written unjudged, and the file says it was a quick run."""
    if machine is None:
        from bench.machine import machine_info
        machine = machine_info()
    path = results_path(name, out, quick=quick, save=save)
    if quick and "targets" in extra:
        extra["targets"] = unjudged(extra["targets"])
    payload = {"benchmark": name, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "machine": machine, "quick": quick, "params": params or {}, "results": results, **extra}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=_jsonable) + "\n")
    os.replace(tmp, path)
    return path


def _jsonable(value):
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def fmt(value, digits: int = 3) -> str:
    """A table cell: None -> '-', numbers to ``digits`` significant figures (all the
    digits of the integer part when it is longer)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "-"
        if value == 0:
            return "0"
        decimals = digits - 1 - math.floor(math.log10(abs(value)))
        if decimals > 0 and abs(round(value, decimals)) >= 10 ** (digits - decimals):
            decimals -= 1   # 9.996 rounds up to 10.0, not 10.00
        return f"{value:,.{max(decimals, 0)}f}"
    return str(value)


def printed(value: float) -> float:
    """``value`` rounded as `fmt` prints it."""
    return float(fmt(float(value)).replace(",", ""))


def format_table(rows: Sequence[dict], columns: Sequence[tuple[str, str]]) -> str:
    """A plain-text table: ``columns`` are (header, key) pairs; numbers align right."""
    cells = [[fmt(row.get(key)) for _, key in columns] for row in rows]
    numeric = [all(isinstance(row.get(key), (int, float)) or row.get(key) is None for row in rows)
               for _, key in columns]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (h, _) in enumerate(columns)]

    def line(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric)).rstrip()

    header = line([h for h, _ in columns])
    return "\n".join([header, "-" * len(header)] + [line(c) for c in cells])


def say(text: str = "") -> None:
    """Progress and tables for people: the benchmarks are command-line programs."""
    print(text, file=sys.stdout, flush=True)
