"""What every benchmark shares: the machine description, timing, tables, JSON and charts.

A result file is one JSON object: ``benchmark`` (its name), ``created`` (UTC, ISO 8601),
``machine`` (see `machine_info`), ``params`` (what was asked), ``results`` (a list of
flat rows, one per measured thing) and whatever else the benchmark adds.
"""
from __future__ import annotations

import json
import logging
import os
import platform
import re
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Callable, Sequence

from ..config import usable_cores

log = logging.getLogger(__name__)

RESULTS_DIR = Path("bench") / "results"   # relative to the working directory

# Distribution names to ask importlib.metadata about (no import, so no side effects).
_DISTRIBUTIONS = {
    "torch": ("torch",),
    "numpy": ("numpy",),
    "pillow": ("pillow", "Pillow", "pillow-simd"),
    "opencv": ("opencv-python-headless", "opencv-python", "opencv-contrib-python-headless",
               "opencv-contrib-python"),
    "pyturbojpeg": ("PyTurboJPEG",),
    "dali": ("nvidia-dali-cuda120", "nvidia-dali-cuda130", "nvidia-dali-cuda110", "nvidia-dali"),
    "lmdb": ("lmdb",),
    "h5py": ("h5py",),
    "matplotlib": ("matplotlib",),
    "torchvision": ("torchvision",),
    "feedline": ("feedline",),
}


# -- the machine ---------------------------------------------------------------------
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def library_versions() -> dict[str, str | None]:
    """Installed versions (None when not installed), plus the libjpeg-turbo PyTurboJPEG loads."""
    versions: dict[str, str | None] = {}
    for key, names in _DISTRIBUTIONS.items():
        versions[key] = None
        for name in names:
            try:
                versions[key] = metadata.version(name)
                break
            except metadata.PackageNotFoundError:
                continue
    if versions["feedline"] is None:
        from .. import __version__
        versions["feedline"] = __version__
    versions["libjpeg_turbo"] = libjpeg_turbo_version()
    return versions


def libjpeg_turbo_version() -> str | None:
    """The version string compiled into the libturbojpeg that PyTurboJPEG loads, if findable."""
    try:
        from ..decoders.turbojpeg_decoder import find_libturbojpeg
        path = find_libturbojpeg()
        import ctypes
        ctypes.CDLL(path)  # loaded: its real file now shows in /proc/self/maps
        real = _mapped_file("turbojpeg") or path
        with open(real, "rb") as fh:
            found = re.search(rb"libjpeg-turbo version ([0-9][0-9.]*[0-9])", fh.read())
        return found.group(1).decode() if found else None
    except Exception as exc:  # best effort: a missing or odd library is not an error here
        log.debug("libjpeg-turbo version not found: %s", exc)
        return None


def _mapped_file(fragment: str) -> str | None:
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 6 and fragment in os.path.basename(parts[-1]):
                    return parts[-1]
    except OSError:
        pass
    return None


def gpu_info() -> dict | None:
    """The first CUDA device as torch sees it; None without one."""
    import torch
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "capability": f"{props.major}.{props.minor}",
            "memory_gib": round(props.total_memory / 2**30, 1), "count": torch.cuda.device_count(),
            "cuda": torch.version.cuda}


def machine_info() -> dict:
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "usable_cores": usable_cores(),
            "memory_gib": memory_gib(), "gpu": gpu_info(), "python": platform.python_version(),
            "platform": platform.platform(), "libraries": library_versions()}


def machine_line(machine: dict) -> str:
    libs = machine["libraries"]
    gpu = machine["gpu"]["name"] if machine["gpu"] else "no GPU"
    shown = ", ".join(f"{k} {v}" for k, v in libs.items() if v and k in
                      ("torch", "pillow", "opencv", "pyturbojpeg", "libjpeg_turbo", "dali"))
    return f"{machine['cpu']}, {machine['usable_cores']} cores, {gpu}; {shown}"


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


def repeat_timed(fn: Callable[[], object], repeats: int, warmup: int = 1) -> list[float]:
    """``warmup`` untimed calls, then the seconds of each of ``repeats`` calls."""
    for _ in range(warmup):
        fn()
    return [timed(fn) for _ in range(repeats)]


def rates(count: float, seconds: Sequence[float]) -> Spread:
    """Items per second for ``count`` items done in each of ``seconds``."""
    return Spread.of([count / max(s, 1e-12) for s in seconds])


# -- output --------------------------------------------------------------------------
def results_path(name: str, out: str | os.PathLike | None = None) -> Path:
    """Where a benchmark's JSON goes: ``out`` if given, else bench/results/NAME.json."""
    return Path(out) if out is not None else RESULTS_DIR / f"{name}.json"


def write_results(name: str, results: list[dict], params: dict | None = None,
                  out: str | os.PathLike | None = None, machine: dict | None = None,
                  **extra) -> Path:
    """Write the JSON of a benchmark (see the module docstring); returns its path."""
    path = results_path(name, out)
    payload = {"benchmark": name, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "machine": machine if machine is not None else machine_info(),
               "params": params or {}, "results": results, **extra}
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
    """A table cell: None -> '-', numbers to about ``digits`` significant figures."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        magnitude = abs(value)
        if magnitude >= 10 ** (digits - 1):
            return f"{value:,.0f}"
        decimals = digits - 1 - (len(str(int(magnitude))) - 1 if magnitude >= 1 else 0)
        return f"{value:.{max(decimals, 0)}f}"
    return str(value)


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


def save_bar_chart(path: str | os.PathLike, labels: Sequence[str], series: dict[str, Sequence[float | None]],
                   title: str, xlabel: str) -> Path | None:
    """A horizontal grouped bar chart as PNG (matplotlib's Agg canvas, no global backend
    switch). Returns None, with a warning, when matplotlib is not installed."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        log.warning("matplotlib is not installed, no chart written: pip install 'feedline[bench]'")
        return None
    path = Path(path)
    n, k = len(labels), max(len(series), 1)
    fig = Figure(figsize=(9, 1.2 + 0.32 * n * k + 0.2 * n))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    height = 0.8 / k
    for j, (name, values) in enumerate(series.items()):
        ys = [i + (j - (k - 1) / 2) * height for i in range(n)]
        xs = [v if v is not None else 0.0 for v in values]
        bars = ax.barh(ys, xs, height=height, label=name)
        for bar, v in zip(bars, values):
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                    f" {fmt(v)}" if v is not None else " n/a", va="center", fontsize=7)
    ax.set_yticks(range(n), labels=list(labels), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    if len(series) > 1:
        ax.legend(fontsize=8, loc="lower right")
    ax.margins(x=0.15)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def say(text: str = "") -> None:
    """Progress and tables for people: the benchmarks are command-line programs."""
    print(text, file=sys.stdout, flush=True)
