"""The benchmark scripts' ``--plot PATH``: bar charts, one panel per column, from the rows a script prints.

Uses the drawing helpers of :mod:`pyg_dist.partition.plot` (matplotlib's Agg backend, imported on first use;
``pip install matplotlib``, else a ``MissingDependencyError`` saying so). A script imports it only when
``--plot`` is given (its sibling: ``sys.path[0]`` is ``scripts/`` when a script runs)::

    import bench_plot
    bench_plot.bar_chart(rows, x="method", ys={"edge_cut": "edge cut"}, path=args.plot, group="parts")
"""
from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

Series = Dict[str, Dict[str, List[float]]]


def _value(row: Mapping[str, Any], key: str) -> float:
    """``row[key]`` as a float; NaN (no bar) when absent or not a number (a failed row)."""
    try:
        v = float(row[key])
    except (KeyError, TypeError, ValueError):
        return math.nan
    return v


def chart_series(rows: Sequence[Mapping[str, Any]], x: str, ys: Mapping[str, str],
                 group: Optional[str] = None, group_label: str = "{}") -> Tuple[List[str], Series]:
    """``(categories, series)``: the x categories in first-seen order and, per panel (``ys``' titles), per group
    (``group_label`` formatted with the row's ``group`` value; one group ``""`` without ``group``), one value per
    category. A category a group has no row for gets NaN; the last row of a (category, group) pair wins."""
    categories: List[str] = []
    groups: List[str] = []
    cell: Dict[Tuple[str, str], Mapping[str, Any]] = {}
    for row in rows:
        c = str(row[x])
        g = group_label.format(row[group]) if group is not None else ""
        categories += [] if c in categories else [c]
        groups += [] if g in groups else [g]
        cell[(c, g)] = row
    series: Series = {}
    for key, title in ys.items():
        series[title] = {g: [_value(cell[(c, g)], key) if (c, g) in cell else math.nan for c in categories]
                         for g in groups}
    return categories, series


def bar_chart(rows: Sequence[Mapping[str, Any]], x: str, ys: Mapping[str, str], path: Union[str, Path],
              title: str = "", group: Optional[str] = None, group_label: str = "{}") -> Tuple[List[str], Series]:
    """Writes a PNG to ``path``: one panel per ``ys`` entry (column key -> panel title), the ``x`` values along
    each panel, the ``group`` values as bars side by side. Returns what was drawn (:func:`chart_series`) and
    prints ``# chart: PATH`` to stderr (the script's table on stdout stays as it was)."""
    from pyg_dist.partition.plot import grouped_bars, new_figure, save_png
    categories, series = chart_series(rows, x, ys, group, group_label)
    fig, axes = new_figure(len(series), title, "a benchmark's --plot")
    for ax, (name, bars) in zip(axes, series.items()):
        grouped_bars(ax, categories, bars, name)  # one group: no legend
    save_png(fig, path)
    print(f"# chart: {path}", file=sys.stderr, flush=True)
    return categories, series


def check_available() -> None:
    """Raises ``MissingDependencyError`` now when matplotlib is missing (before a long benchmark, not after)."""
    from pyg_dist.partition.plot import load_matplotlib
    load_matplotlib("a benchmark's --plot")
