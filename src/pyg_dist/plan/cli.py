"""``pyg-dist-plan``: how many machines, how long an epoch, how much memory a rank (see :mod:`pyg_dist.plan`).

Example::

    pyg-dist-plan --graph /tmp/products_like.pt --x-dim 100 --num-classes 47 --train-frac 0.1 --machines 1 2 4 8
    pyg-dist-plan ... --check          # also runs the job for the rows this machine can run: predicted/measured
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from pyg_dist.errors import InvalidArgumentError, PyGDistError
from pyg_dist.plan import calibrate as cal
from pyg_dist.plan.job import fanouts
from pyg_dist.plan.model import STAGES, Costs, Machines, Prediction, predict, with_speedups
from pyg_dist.plan.replay import Counts, assign, replay
from pyg_dist.plan.source import folder, folder_owner, load_graph, machine_cores

#: ``--check``'s rows: (ranks, emulated link Gb/s or None); those with more ranks than ``--check-ranks`` allows
#: are left out.
CHECK_ROWS = ((1, None), (2, None), (4, None), (2, 1.0), (2, 10.0))


def parser() -> argparse.ArgumentParser:
    """The command line (its groups: the graph, the job, the machines, the run)."""
    p = argparse.ArgumentParser(prog="pyg-dist-plan", description=__doc__.split("\n\n")[0])
    g = p.add_argument_group("graph").add_mutually_exclusive_group(required=True)
    g.add_argument("--graph", default=None, help="a {rowptr, col, N} file (python -m pyg_dist.datasets.products_like)")
    g.add_argument("--dataset", default=None, help="any dataset name pyg-dist-partition reads")
    p.add_argument("--root", default=None, help="where the dataset lies")
    for flag, kind in (("--x-dim", int), ("--num-classes", int), ("--train-frac", float)):
        p.add_argument(flag, type=kind, default=None, help="generated graphs: passed to pyg-dist-partition")
    p.add_argument("--method", choices=["metis", "random"], default="metis", help="how the graph is partitioned")
    job = p.add_argument_group("the job")
    job.add_argument("--num-neighbors", type=fanouts, default=[15, 10, 5])
    job.add_argument("--batch-size", type=int, default=1024)
    job.add_argument("--hidden", type=int, default=256, help="GraphSAGE width (depth = number of fanouts)")
    m = p.add_argument_group("the machines")
    m.add_argument("--machines", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    m.add_argument("--ranks-per-machine", type=int, default=1)
    m.add_argument("--cores", type=int, default=None, help="cores per machine (default: this machine's)")
    m.add_argument("--link-gbps", type=float, default=10.0, help="the network between machines")
    r = p.add_argument_group("the run")
    r.add_argument("--work", default="pyg_dist_plan", help="folder for partitions, records and costs.json")
    r.add_argument("--steps", type=int, default=20, help="calibration batches per run (after --warmup batches)")
    r.add_argument("--warmup", type=int, default=5, help="calibration batches run first, not timed")
    r.add_argument("--repeats", type=int, default=2, help="calibration rounds (interleaved; their batches merged)")
    r.add_argument("--replay-batches", type=int, default=16, help="batches replayed per part count")
    r.add_argument("--costs", default=None, help="reuse this costs.json instead of calibrating")
    r.add_argument("--json", default=None, help="also write the plan (and check) as JSON here ('-': stdout)")
    r.add_argument("--chart", default=None, help="draw the plan into this PNG (needs matplotlib)")
    r.add_argument("--check", action="store_true", help="run the job for 1, 2, 4 ranks here and compare")
    r.add_argument("--check-ranks", type=int, default=4, help="--check: the most ranks to run here")
    r.add_argument("--check-rows", nargs="+", default=None, metavar="RANKS[@GBPS]",
                   help="--check: these rows instead (e.g. 2 2@1: 2 ranks on loopback, 2 ranks at an emulated 1 Gb/s)")
    r.add_argument("--check-steps", type=int, default=0, help="--check: batches per epoch (0: whole epochs)")
    r.add_argument("--check-warmup", type=int, default=0,
                   help="--check: batches run first and not compared (0: the first epoch is compared, start-up "
                        "included)")
    return p


def _validate(args) -> None:
    if min(args.check_steps, args.check_warmup) < 0:
        raise InvalidArgumentError("pyg-dist-plan", "--check-steps/--check-warmup",
                                   (args.check_steps, args.check_warmup), ">= 0")
    for name in ("batch_size", "hidden", "ranks_per_machine", "steps", "replay_batches", "check_ranks", "repeats"):
        if getattr(args, name) < 1:
            raise InvalidArgumentError("pyg-dist-plan", f"--{name.replace('_', '-')}", getattr(args, name), ">= 1")
    if args.warmup < 0:
        raise InvalidArgumentError("pyg-dist-plan", "--warmup", args.warmup, ">= 0")
    if any(n < 1 for n in args.machines):
        raise InvalidArgumentError("pyg-dist-plan", "--machines", args.machines, "machine counts >= 1")
    if not args.link_gbps > 0:
        raise InvalidArgumentError("pyg-dist-plan", "--link-gbps", args.link_gbps, "> 0")


def job_args(args) -> List[str]:
    return ["--num-neighbors", ",".join(map(str, args.num_neighbors)), "--batch-size", str(args.batch_size),
            "--hidden", str(args.hidden)]


def all_counts(args, graph, parts: List[int], say) -> Dict[int, Counts]:
    """The replayed :class:`~.replay.Counts` of every part count in ``parts``."""
    out = {}
    for n in sorted(set(parts)):
        t = time.perf_counter()
        written = Path(args.work) / f"parts-{n}"
        owner = folder_owner(written) if (written / "META.json").exists() else None
        how = f"{written}'s partitions" if owner is not None else args.method
        if owner is None:
            owner = assign(graph, n, args.method)
        out[n] = replay(graph, owner, args.num_neighbors, args.batch_size, max(args.replay_batches, n))
        say(f"replayed {max(args.replay_batches, n)} batches on {n} part(s) ({how}) in {time.perf_counter() - t:.1f}"
            f" s: remote edges {out[n].remote_edge_frac:.1%}, remote rows {out[n].remote_row_frac:.1%}")
    return out


def get_costs(args, counts, cores: int, say, graph) -> Costs:
    """``--costs`` read back (for this graph: :meth:`~.model.Costs.for_graph`), else a calibration on this
    machine (written to ``<work>/costs.json``). ``graph``: ``(nodes, edges, training nodes or None)``."""
    if args.costs:
        try:
            costs = Costs(**json.loads(Path(args.costs).read_text()))
        except (OSError, ValueError, TypeError) as e:
            raise InvalidArgumentError("pyg-dist-plan", "--costs", args.costs, f"a costs.json it wrote ({e})") from None
        return costs.for_graph(*graph)
    t = time.perf_counter()
    folders = {n: folder(args, n, say) for n in (1, 2)}
    costs = cal.calibrate(folders, counts, Path(args.work), job_args(args), args.steps, cores, say, args.warmup,
                          args.repeats)
    costs.graph_nodes, costs.graph_edges = graph[0], graph[1]
    (Path(args.work) / "costs.json").write_text(json.dumps(costs.as_dict(), indent=1))
    say(f"calibrated in {time.perf_counter() - t:.1f} s -> {Path(args.work) / 'costs.json'}")
    return costs


def plan_rows(args, costs: Costs, counts, cores: int) -> List[Prediction]:
    """One prediction per ``--machines`` count, with speed-ups over the first."""
    rows = [predict(costs, counts[n * args.ranks_per_machine],
                    Machines(n * args.ranks_per_machine, n, cores, args.link_gbps), args.batch_size)
            for n in args.machines]
    return with_speedups(rows)


def table(rows: List[Prediction], cores: int, args) -> str:
    """The plan as a Markdown table."""
    head = ("| machines | ranks | threads/rank | batches/rank | " + " | ".join(f"{s} ms" for s in STAGES)
            + " | epoch s | bound by | speed-up | RSS/rank MiB |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        lines.append(f"| {r.machines} | {r.ranks} | {r.threads} | {r.batches} | "
                     + " | ".join(f"{r.ms[s]:.1f}" for s in STAGES)
                     + f" | {r.epoch_s:.1f} | {r.bound} | {r.speedup:.2f}x | {r.rss_mb:.0f} |")
    return "\n".join(lines)


def assumptions(args, cores: int, costs: Costs) -> List[str]:
    """What the plan assumed (printed under the table and kept in the JSON)."""
    given = [f"costs read from {args.costs} (measured on a graph of {costs.graph_nodes:,} nodes / "
             f"{costs.graph_edges:,} edges; partition bytes and seeds scaled to this one)"] if args.costs else []
    return given + [
            f"machines of {cores} cores, {args.ranks_per_machine} rank(s) each, joined by {args.link_gbps:g} Gb/s; "
            "every remote byte crosses the NIC (ranks on one machine are counted as remote too)",
            f"one-thread unit costs measured on this machine; threads beyond 2 extrapolated by Amdahl (serial "
            f"fraction {', '.join(f'{k} {v:.2f}' for k, v in costs.phi.items())})",
            f"partitions: <work>/parts-N where written, else {args.method} (replayed per machine count); no feature "
            f"cache, no sampler workers, concurrency 1, {costs.row_bytes} B feature rows; remote calls cost "
            f"{costs.lat * 1e3:.2f} ms each (empty-call latency measured here)"]


def check_rows(args) -> List[Tuple[int, Optional[float]]]:
    """``--check-rows`` parsed, else the :data:`CHECK_ROWS` within ``--check-ranks``."""
    if not args.check_rows:
        return [(r, g) for r, g in CHECK_ROWS if r <= args.check_ranks]
    rows = []
    for text in args.check_rows:
        ranks, _, gbps = text.partition("@")
        try:
            row = (int(ranks), float(gbps) if gbps else None)
        except ValueError:
            row = (0, None)
        if row[0] < 1 or (row[1] is not None and not row[1] > 0):
            raise InvalidArgumentError("pyg-dist-plan", "--check-rows", text, "RANKS or RANKS@GBPS (e.g. 2 or 2@10)")
        rows.append(row)
    return rows


def check(args, costs: Costs, counts, cores: int, say) -> List[dict]:
    """Runs the job for each :func:`check_rows` row; predicted against measured epochs."""
    out = []
    for ranks, gbps in check_rows(args):
        threads = max(1, cores // ranks)
        pred = predict(costs, counts[ranks], Machines(ranks, 1, cores, gbps, emulated=True), args.batch_size)
        run = cal.run_job(folder(args, ranks, say), ranks, threads, Path(args.work) / f"check_{ranks}_{gbps}.jsonl",
                          job_args(args), steps=args.check_steps, warmup=args.check_warmup, link_gbps=gbps)
        batches = int(run.record["ranks"][0]["batches"])
        scale = batches / pred.batches  # --check-steps: the epoch predicted for the batches run
        cold = 0.0 if args.check_warmup else costs.cold_s
        predicted = (pred.epoch_s - costs.epoch_other) * scale + costs.epoch_other + cold
        measured, rss = run.wall_s, run.per_batch()["rss_mb"]
        out.append({"ranks": ranks, "link_gbps": gbps, "threads": threads, "batches": batches,
                    "predicted_s": predicted, "measured_s": measured, "error": predicted / measured - 1,
                    "predicted_rss_mb": pred.rss_mb, "measured_rss_mb": rss,
                    "rss_error": pred.rss_mb / max(rss, 1e-9) - 1})
        say(f"check {ranks} rank(s){'' if gbps is None else f' at {gbps:g} Gb/s'}: predicted "
            f"{predicted:.1f} s, measured {measured:.1f} s ({predicted / measured - 1:+.0%})")
    return out


def check_table(rows: List[dict]) -> str:
    """The ``--check`` rows as a Markdown table."""
    lines = ["| ranks here | link | batches/rank | predicted s | measured s | error | predicted RSS MiB | "
             "measured RSS MiB | RSS error |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        link = "loopback" if r["link_gbps"] is None else f"{r['link_gbps']:g} Gb/s (emulated)"
        lines.append(f"| {r['ranks']} | {link} | {r['batches']} | {r['predicted_s']:.1f} | {r['measured_s']:.1f} | "
                     f"{r['error']:+.0%} | {r['predicted_rss_mb']:.0f} | {r['measured_rss_mb']:.0f} | "
                     f"{r['rss_error']:+.0%} |")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    """Console entry point; returns the exit status (2 on a user error or a failed run, message on stderr)."""
    args = parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    from pyg_dist.plan.report import run
    try:
        _validate(args)
        if args.chart:  # fail before the runs, not after them
            from pyg_dist.partition.plot import load_matplotlib
            load_matplotlib("pyg-dist-plan --chart")
        return run(args, sys.stderr)
    except PyGDistError as e:
        print(f"pyg-dist-plan: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = ["main", "parser", "CHECK_ROWS", "all_counts", "get_costs", "plan_rows", "table", "check", "check_table",
           "assumptions", "machine_cores", "load_graph"]
