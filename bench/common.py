"""What the bench/ scripts share: this working tree first on sys.path, results in
bench/results/, and the helpers of feedline.benchmarks.common.

A script in bench/ writes its JSON with ``write_results(NAME, rows, params)``
(-> bench/results/NAME.json, with the machine description), prints tables with
``format_table(rows, [(header, key), ...])`` and charts with ``save_bar_chart``;
``prepare_data(DATA, n)`` gives the benchmark data set (generated and packed into
~/.cache/feedline when DATA is None). See feedline/benchmarks/common.py.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
if str(ROOT) not in sys.path:   # the scripts measure this tree, installed or not
    sys.path.insert(0, str(ROOT))

from feedline.benchmarks import common as _common  # noqa: E402
from feedline.benchmarks.common import (Spread, format_table, fmt, machine_info, machine_line,  # noqa: E402,F401
                                        rates, repeat_timed, save_bar_chart, say, timed, usable_cores)
from feedline.benchmarks.data import BenchData, prepare_data, read_encoded  # noqa: E402,F401


def write_results(name: str, results: list[dict], params: dict | None = None, out=None, **extra) -> Path:
    """bench/results/NAME.json (or ``out``): benchmark, created, machine, params, results, extra."""
    return _common.write_results(name, results, params, out if out is not None else RESULTS_DIR / f"{name}.json",
                                 **extra)


def run_script(which: str, argv: list[str] | None = None) -> int:
    """Run ``feedline bench WHICH`` with bench/results/WHICH.json as the default --out."""
    from feedline.cli.bench import standalone
    return standalone(which, argv, default_out=str(RESULTS_DIR / f"{which}.json"))


__all__ = ["ROOT", "RESULTS_DIR", "BenchData", "Spread", "format_table", "fmt", "machine_info", "machine_line",
           "prepare_data", "rates", "read_encoded", "repeat_timed", "run_script", "save_bar_chart", "say", "timed",
           "usable_cores", "write_results"]
