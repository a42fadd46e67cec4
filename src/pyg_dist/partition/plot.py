"""Charts of a partitioning (``pyg-dist-partition --plot``): nodes, edges, halo nodes and training nodes per part.

matplotlib is optional (``pip install matplotlib``, the ``plot`` extra); it is imported on first use and draws
with its Agg backend on a figure of its own (no ``pyplot``, so no global backend switch and no window). The same small
helpers draw the benchmark scripts' charts (``scripts/bench_plot.py``).

Example:
    >>> from pyg_dist.partition.plot import plot_partition_report
    >>> series = plot_partition_report(stats, "/tmp/p4/partition_report.png")  # doctest: +SKIP
    >>> series["edges"]                                                          # doctest: +SKIP
    {'all edge types': [5120, 4987, 5033, 5210]}
"""
from __future__ import annotations

import importlib
import math
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from pyg_dist.errors import FileWriteError, MissingDependencyError

#: The file ``pyg-dist-partition --plot`` writes into the output folder.
REPORT_PNG = "partition_report.png"
#: What to install for the charts.
PLOT_EXTRA = "matplotlib"  # the plot extra's one package (pip install -e ".[plot]" from a clone)
#: Panel title -> bar label -> one value per category (per part, per method, ...), as drawn.
Series = Dict[str, Dict[str, List[float]]]


def load_matplotlib(needed_for: str = "drawing charts") -> Tuple[Any, Any]:
    """``(Figure, FigureCanvasAgg)`` from matplotlib, imported now.

    Raises:
        MissingDependencyError: matplotlib is not installed; the message says ``pip install matplotlib``.
    """
    try:
        figure = importlib.import_module("matplotlib.figure")
        agg = importlib.import_module("matplotlib.backends.backend_agg")
    except ImportError:
        raise MissingDependencyError("matplotlib", needed_for, PLOT_EXTRA) from None
    return figure.Figure, agg.FigureCanvasAgg


def new_figure(panels: int, title: str = "", needed_for: str = "drawing charts",
               panel_size: Tuple[float, float] = (4.6, 3.2)) -> Tuple[Any, List[Any]]:
    """A figure of ``panels`` axes (one row of up to three, else two columns) and its axes, in reading order."""
    figure_cls, canvas_cls = load_matplotlib(needed_for)
    panels = max(panels, 1)
    cols = panels if panels <= 3 else 2
    rows = math.ceil(panels / cols)
    fig = figure_cls(figsize=(panel_size[0] * cols, panel_size[1] * rows + (0.4 if title else 0)), dpi=100)
    canvas_cls(fig)
    axes = [fig.add_subplot(rows, cols, i + 1) for i in range(panels)]
    if title:
        fig.suptitle(title, fontsize=11)
    return fig, axes


def grouped_bars(ax: Any, categories: Sequence[str], bars: Dict[str, List[float]], title: str,
                 ylabel: str = "", annotate: bool = True, empty: str = "nothing to show") -> None:
    """One bar per category and label (labels side by side, a legend when there are several); NaN: no bar;
    no labels at all: the text ``empty`` instead."""
    n = max(len(bars), 1)
    width = 0.8 / n
    for i, (label, values) in enumerate(bars.items()):
        xs = [c + (i - (n - 1) / 2) * width for c in range(len(categories))]
        drawn = ax.bar(xs, values, width=width, label=label)
        if annotate and len(categories) * n <= 16:
            ax.bar_label(drawn, labels=[_short(v) for v in values], fontsize=7, padding=1)
    ax.set_xticks(range(len(categories)))
    long = sum(len(str(c)) for c in categories) > 48
    ax.set_xticklabels([str(c) for c in categories], rotation=25 if long else 0, ha="right" if long else "center",
                       fontsize=8)
    ax.set_title(title, fontsize=10)
    if ylabel:
        ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(axis="y", labelsize=8)
    ax.margins(y=0.12)
    if len(bars) > 1:  # above the bars, on lines of its own: one label a line when they are long
        ncol = min(len(bars), 4) if sum(len(k) for k in bars) <= 40 else 1
        ax.margins(y=0.12 + 0.13 * math.ceil(len(bars) / ncol))
        ax.legend(fontsize=7, loc="upper center", ncol=ncol, frameon=False)
    if not bars:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes, fontsize=9)


def _short(value: float) -> str:
    """A bar's label: ``1.23M``, ``35.2k``, ``0.231``; empty for NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    a = abs(value)
    if a >= 1e6:
        return f"{value / 1e6:.2f}M"
    if a >= 1e4:
        return f"{value / 1e3:.1f}k"
    if float(value).is_integer():
        return f"{int(value)}"
    return f"{value:.3g}"


def save_png(fig: Any, path: Union[str, Path]) -> Path:
    """Writes ``fig`` as a PNG to ``path`` (its folder created); returns the path.

    Raises:
        FileWriteError: the file could not be written (names it and the cause).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.tight_layout()
        fig.savefig(path, format="png")
    except OSError as exc:
        raise FileWriteError(path, exc.errno, exc.strerror or str(exc)) from None
    return path


def partition_series(stats: Dict[str, Any]) -> Series:
    """What :func:`plot_partition_report` draws, from the partitioner's statistics (``Partitioner.save``'s
    return value, ``META.json``'s ``stats``): per panel, per node type (or all edge types), one value per part.

    Raises:
        KeyError: ``stats`` lacks a per-part list (not a partitioner's statistics).
    """
    return {
        "nodes": {str(t): list(v) for t, v in stats["nodes_per_part"].items()},
        "edges": {"all edge types": list(stats["edges_per_part"])},
        "halo nodes": {"all node types": list(stats["halo_nodes_per_part"])},
        "training nodes": {str(t): list(v) for t, v in stats.get("train_per_part", {}).items()},
    }


def report_title(stats: Dict[str, Any], label: str = "") -> str:
    """The chart's heading: ``label``, the part count, edge cut, halo ratio and edge balance."""
    head = f"{label}: " if label else ""
    return (f"{head}{stats['num_parts']} parts, edge cut {stats['edge_cut']:.3f}, "
            f"halo/owned {stats['halo_ratio']:.3f}, edge balance {stats['edge_balance']:.3f}")


def plot_partition_report(stats: Dict[str, Any], path: Union[str, Path], label: str = "") -> Series:
    """Draws nodes, edges, halo nodes and training nodes per part (one panel each; node types side by side)
    into the PNG ``path``; returns the numbers drawn (:func:`partition_series`).

    A graph without a ``train_mask`` gets an empty training-nodes panel that says so.

    Raises:
        MissingDependencyError: matplotlib is not installed (``pip install matplotlib``, the ``plot`` extra).
        FileWriteError: the PNG could not be written.
    """
    series = partition_series(stats)
    parts = [str(p) for p in range(int(stats["num_parts"]))]
    fig, axes = new_figure(len(series), report_title(stats, label), "pyg-dist-partition --plot")
    for ax, (name, bars) in zip(axes, series.items()):
        only = next(iter(bars)) if len(bars) == 1 and name in ("nodes", "training nodes") else "_N"
        title = f"{name} per part" + ("" if only == "_N" else f" ({only})")  # the one node type, when typed
        grouped_bars(ax, parts, {k: [float(x) for x in v] for k, v in bars.items()}, title,
                     empty="no train_mask in this graph")
        ax.set_xlabel("part", fontsize=8)
    save_png(fig, path)
    return series


def report_path(out: Union[str, Path], name: Optional[str] = None) -> Path:
    """Where ``pyg-dist-partition --plot`` writes its chart: ``out/partition_report.png``."""
    return Path(os.fspath(out)) / (name or REPORT_PNG)
