"""A horizontal grouped bar chart as PNG, next to a benchmark's JSON."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Sequence

from bench.common import fmt

log = logging.getLogger(__name__)


def save_bar_chart(path: str | os.PathLike, labels: Sequence[str], series: dict[str, Sequence[float | None]],
                   title: str, xlabel: str) -> Path | None:
    """Bars per label, one colour per series (matplotlib's Agg canvas, no global backend
    switch). Returns None, with a warning, when matplotlib is not installed."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        log.warning("matplotlib is not installed, no chart written: pip install matplotlib")
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
