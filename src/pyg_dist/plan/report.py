"""``pyg-dist-plan``'s run: replay, calibrate, predict, print the table (and check, chart, JSON)."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, List

from pyg_dist.plan import cli
from pyg_dist.plan.model import STAGES, Prediction


def run(args, err: IO[str]) -> int:
    """The whole command (see :mod:`pyg_dist.plan`); progress on ``err``, the tables on stdout."""
    def say(line: str) -> None:
        print(line, file=err, flush=True)

    start = time.perf_counter()
    Path(args.work).mkdir(parents=True, exist_ok=True)
    cores = cli.machine_cores(args.cores)
    here = cli.machine_cores(None)
    graph = cli.load_graph(args)
    say(f"graph: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges")
    parts = ([] if args.costs else [1, 2]) + [n * args.ranks_per_machine for n in args.machines]
    if args.check:
        parts += [r for r, _ in cli.check_rows(args)]
    written = ([] if args.costs else [1, 2]) + ([r for r, _ in cli.check_rows(args)] if args.check else [])
    for n in sorted(set(written)):  # first: the replay of a part count that runs uses its folder's partitions
        cli.folder(args, n, say)
    counts = cli.all_counts(args, graph, parts, say)
    size = (graph.num_nodes, graph.num_edges, graph.num_train if graph.train is not None else None)
    del graph
    costs = cli.get_costs(args, counts, here, say, size)
    rows = cli.plan_rows(args, costs, counts, cores)
    print(cli.table(rows, cores, args))
    print()
    for line in cli.assumptions(args, cores, costs):
        print(f"- {line}")
    checked: List[dict] = []
    if args.check:
        checked = cli.check(args, costs, counts, here, say)
        print()
        print(cli.check_table(checked))
    if args.chart:
        say(f"chart: {chart(rows, args.chart)}")
    if args.json:
        doc = {"rows": [r.as_dict() for r in rows], "check": checked, "costs": costs.as_dict(),
               "counts": {n: c.as_dict() for n, c in counts.items()},
               "assumptions": cli.assumptions(args, cores, costs)}
        text = json.dumps(doc, indent=1)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text)
    say(f"planned in {time.perf_counter() - start:.1f} s")
    return 0


def chart(rows: List[Prediction], path: str) -> Path:
    """Two panels: each row's epoch seconds split by stage, and its speed-up over one machine."""
    from pyg_dist.partition.plot import grouped_bars, new_figure, save_png
    fig, (left, right) = new_figure(2, "pyg-dist-plan: predicted epoch")
    names = [f"{r.machines}" for r in rows]
    bottom = [0.0] * len(rows)
    for s in STAGES:
        secs = [r.ms[s] * r.batches / 1e3 for r in rows]
        left.bar(names, secs, bottom=bottom, label=s)
        bottom = [b + v for b, v in zip(bottom, secs)]
    left.set_title("epoch seconds by stage", fontsize=10)
    left.set_xlabel("machines", fontsize=8)
    left.legend(fontsize=7, frameon=False)
    grouped_bars(right, names, {"speed-up": [r.speedup for r in rows]}, "speed-up over 1 machine")
    right.set_xlabel("machines", fontsize=8)
    return save_png(fig, path)


__all__ = ["run", "chart"]
