"""``pyg-dist-plan``'s run: replay, calibrate, predict, print the table (and check, chart, JSON); :mod:`.cli`
parses the command line and calls :func:`run`."""
from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import IO, Dict, List, Optional, Tuple

from pyg_dist.errors import InvalidArgumentError
from pyg_dist.plan import calibrate as cal
from pyg_dist.plan.model import STAGES, Costs, Machines, Prediction, crowding_factor, predict, with_speedups
from pyg_dist.plan.replay import Counts, assign, replay
from pyg_dist.plan.source import folder, folder_owner, load_graph, machine_cores

#: ``--check``'s rows: (ranks, emulated link Gb/s or None); those with more ranks than ``--check-ranks`` allows
#: are left out.
CHECK_ROWS = ((1, None), (2, None), (4, None), (2, 1.0), (2, 10.0))


def run(args, err: IO[str]) -> int:
    """The whole command (see :mod:`pyg_dist.plan`); progress on ``err``, the tables on stdout."""
    def say(line: str) -> None:
        print(line, file=err, flush=True)

    start = time.perf_counter()
    Path(args.work).mkdir(parents=True, exist_ok=True)
    cores = machine_cores(args.cores)
    here = machine_cores(None)
    graph = load_graph(args)
    say(f"graph: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges")
    parts = ([] if args.costs else list(cal.PARTS)) + [n * args.ranks_per_machine for n in args.machines]
    if args.check:
        parts += [r for r, _ in check_rows(args)]
    written = ([] if args.costs else list(cal.PARTS)) + ([r for r, _ in check_rows(args)] if args.check else [])
    for n in sorted(set(written)):  # first: the replay of a part count that runs uses its folder's partitions
        folder(args, n, say)
    counts = all_counts(args, graph, parts, say)
    size = (graph.num_nodes, graph.num_edges, graph.num_train if graph.train is not None else None)
    del graph
    costs = get_costs(args, counts, here, say, size)
    rows = plan_rows(args, costs, counts, cores)
    print(table(rows, cores, args))
    print()
    if args.memory_gb:
        print(fit_line(rows, args))
        print()
    for line in assumptions(args, cores, costs):
        print(f"- {line}")
    checked: List[dict] = []
    if args.check:
        checked = check(args, costs, counts, here, say)
        print()
        print(check_table(checked))
        print()
        print(stage_table(checked))
    if args.chart:
        say(f"chart: {chart(rows, args.chart)}")
    if args.json:
        doc = {"rows": [dict(r.as_dict(), machine_rss_gb=machine_gb(r), fits=fits(r, args)) for r in rows],
               "check": checked, "costs": costs.as_dict(),
               "counts": {n: c.as_dict() for n, c in counts.items()},
               "assumptions": assumptions(args, cores, costs)}
        text = json.dumps(doc, indent=1)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text)
    say(f"planned in {time.perf_counter() - start:.1f} s")
    return 0


def job_args(args, calibration: bool = False) -> List[str]:
    """The job's loader and model settings, the same in every run (the calibration's without the cache and the
    sampler workers: it runs its own with one)."""
    ratio = ["--cache-ratio", str(args.cache_ratio)] if args.cache_ratio and not calibration else []
    workers = ["--num-workers", str(args.num_workers)] if args.num_workers and not calibration else []
    return ["--num-neighbors", ",".join(map(str, args.num_neighbors)), "--batch-size", str(args.batch_size),
            "--hidden", str(args.hidden), "--remote-rows", args.remote_rows, *ratio, *workers,
            "--device", "cuda" if getattr(args, "gpu", False) else "cpu"]


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
        out[n] = replay(graph, owner, args.num_neighbors, args.batch_size, max(args.replay_batches, n),
                        cache_ratio=args.cache_ratio)
        cached = f", {out[n].cached_row_frac:.1%} of all rows read from the cache" if args.cache_ratio else ""
        say(f"replayed {max(args.replay_batches, n)} batches on {n} part(s) ({how}) in {time.perf_counter() - t:.1f}"
            f" s: remote edges {out[n].remote_edge_frac:.1%}, remote rows {out[n].remote_row_frac:.1%}{cached}")
    return out


def get_costs(args, counts, cores: int, say, graph) -> Costs:
    """``--costs`` read back (for this graph: :meth:`~.model.Costs.for_graph`), else a calibration on this
    machine (written to ``<work>/costs.json``). ``graph``: ``(nodes, edges, training nodes or None)``."""
    if args.costs:
        try:
            data = json.loads(Path(args.costs).read_text())
        except (OSError, ValueError) as e:
            raise InvalidArgumentError("pyg-dist-plan", "--costs", args.costs, f"a costs.json it wrote ({e})") from None
        try:
            costs = Costs.read(data, "--costs")
        except TypeError as e:  # a required field missing
            raise InvalidArgumentError("pyg-dist-plan", "--costs", args.costs, f"a costs.json it wrote ({e})") from None
        if args.num_workers and not costs.workers:
            raise InvalidArgumentError("pyg-dist-plan", "--costs", args.costs, "costs calibrated with --num-workers "
                                       "for a plan with sampler workers (these hold none of their terms)")
        if bool(args.gpu) != (costs.gpu > 0):
            raise InvalidArgumentError("pyg-dist-plan", "--costs", args.costs, (
                "costs calibrated on a GPU (pyg-dist-plan --gpu on a machine with one) for a plan of GPU machines"
                if args.gpu else "costs calibrated without a GPU for a plan of CPU machines (these were measured "
                f"with {costs.gpu:.0%} of the ranks on a GPU: add --gpu)"))
        return costs.for_graph(*graph)
    t = time.perf_counter()
    folders = {n: folder(args, n, say) for n in cal.PARTS}
    costs = cal.calibrate(folders, {n: replace(c, cached_row_frac=0.0, cache_rows=0.0) for n, c in counts.items()},
                          Path(args.work), job_args(args, calibration=True), args.steps, cores, say, args.warmup,
                          args.repeats, workers=args.num_workers > 0)
    costs.graph_nodes, costs.graph_edges = graph[0], graph[1]
    (Path(args.work) / "costs.json").write_text(json.dumps(costs.as_dict(), indent=1))
    say(f"calibrated in {time.perf_counter() - t:.1f} s -> {Path(args.work) / 'costs.json'}")
    if args.gpu and costs.gpu < 1.0:  # the job was told cuda: a rank that trained elsewhere is not a GPU's cost
        raise cal.JobFailedError(f"pyg-dist-plan --gpu: {1 - costs.gpu:.0%} of the calibration's ranks trained on "
                                 "the CPU (is CUDA_VISIBLE_DEVICES hiding the GPUs?); the costs are in "
                                 f"{Path(args.work) / 'costs.json'}, not a plan of GPU machines")
    return costs


def plan_rows(args, costs: Costs, counts, cores: int) -> List[Prediction]:
    """One prediction per ``--machines`` count, with speed-ups over the first."""
    rows = [predict(costs, counts[n * args.ranks_per_machine],
                    Machines(n * args.ranks_per_machine, n, cores, args.link_gbps, workers=args.num_workers),
                    args.batch_size)
            for n in args.machines]
    return with_speedups(rows)


def table(rows: List[Prediction], cores: int, args) -> str:
    """The plan as a Markdown table."""
    head = ("| machines | ranks | threads/rank | batches/rank | " + " | ".join(f"{s} ms" for s in STAGES)
            + " | batch ms | epoch s | bound by | speed-up | RSS/rank MiB | RSS/machine GiB |"
            + (f" fits {args.memory_gb:g} GiB |" if args.memory_gb else ""))
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        verdict = {True: " yes |", False: " **no** |", None: ""}[fits(r, args)]
        lines.append(f"| {r.machines} | {r.ranks} | {r.threads} | {r.batches} | "
                     + " | ".join(f"{r.ms[s]:.1f}" for s in STAGES)
                     + f" | {r.batch_ms:.1f} | {r.epoch_s:.1f} | {r.bound} | {r.speedup:.2f}x | {r.rss_mb:.0f} | "
                     + f"{machine_gb(r):.1f} |{verdict}")
    return "\n".join(lines)


def machine_gb(row: Prediction) -> float:
    """A machine's predicted memory, GiB: its ranks' peak RSS (each with its sampler workers)."""
    return row.ranks // row.machines * row.rss_mb / 1024


def fits(row: Prediction, args) -> Optional[bool]:
    """Whether a machine's ranks fit in ``--memory-gb`` (``None`` without it)."""
    return None if not args.memory_gb else machine_gb(row) <= args.memory_gb


def fit_line(rows: List[Prediction], args) -> str:
    """The fewest planned machines whose ranks fit in ``--memory-gb``, with its epoch; or that none does."""
    fitting = [r for r in rows if fits(r, args)]
    if not fitting:
        most = min(rows, key=lambda r: machine_gb(r))
        return (f"none of the planned counts fits {args.memory_gb:g} GiB a machine: the least is "
                f"{machine_gb(most):.1f} GiB at {most.machines} machine(s); plan more machines or fewer ranks "
                "a machine")
    best = min(fitting, key=lambda r: r.machines)
    return (f"the fewest machines whose ranks fit in {args.memory_gb:g} GiB: {best.machines} "
            f"({machine_gb(best):.1f} GiB a machine, epoch {best.epoch_s:.1f} s)")


def assumptions(args, cores: int, costs: Costs) -> List[str]:
    """What the plan assumed (printed under the table and kept in the JSON)."""
    given = [f"costs read from {args.costs} (measured on a graph of {costs.graph_nodes:,} nodes / "
             f"{costs.graph_edges:,} edges; partition bytes and seeds scaled to this one)"] if args.costs else []
    return given + [
            f"machines of {cores} cores, {args.ranks_per_machine} rank(s) each, joined by {args.link_gbps:g} Gb/s; "
            "every remote byte crosses the NIC (ranks on one machine are counted as remote too)",
            f"one-thread unit costs measured on this machine; threads beyond 2 extrapolated by Amdahl (serial "
            f"fraction {', '.join(f'{k} {v:.2f}' for k, v in costs.phi.items())})",
            f"partitions: <work>/parts-N where written, else {args.method} (replayed per machine count); "
            f"{_cache_words(args)}, {_worker_words(args, costs)}, concurrency 1, {costs.row_bytes} B feature rows, "
            f"{costs.wire_row_bytes or costs.row_bytes} B on the wire per fetched row ({args.remote_rows}); remote "
            f"calls cost {costs.lat * 1e3:.2f} ms each (empty-call latency measured here)",
            f"torch's huge pages for large tensors in {costs.huge_pages:.0%} of the calibration's ranks "
            "(THP_MEM_ALLOC_ENABLE=1 at launch; without them a batch costs up to 1.6x the CPU)",
            _growth_words(costs), _device_words(costs)] + _crowding_words(args, cores, costs)


def _device_words(costs: Costs) -> str:
    if not costs.gpu:
        return "CPU machines: the job trained on the CPU (the calibration hid the GPUs)"
    return (f"GPU machines, one GPU a rank: the job trained on a GPU in {costs.gpu:.0%} of the calibration's ranks "
            "(model step and device copies measured there, not modelled; ranks sharing a GPU are not modelled)")


def _crowding_words(args, cores: int, costs: Costs) -> List[str]:
    """What the calibration measured of crowded cores, and a line where a machine's processes (its ranks, each
    with its sampler workers) outnumber its cores."""
    words = []
    if costs.crowding_at > 1:
        words.append(f"crowding: the calibration's 4 ranks on {4 / costs.crowding_at:g} core(s) took "
                     f"{costs.crowding:.2f}x the batch the model gives them sharing the cores' time; charged where a "
                     f"machine's processes outnumber its cores, as 1 + {costs.crowding - 1:.2f} x log2(processes a "
                     f"core) / log2({costs.crowding_at:g})")
    procs = args.ranks_per_machine * (1 + args.num_workers)
    if procs > cores:
        factor = crowding_factor(costs, Machines(args.ranks_per_machine, 1, cores, workers=args.num_workers))
        words.append(f"{procs} processes a machine on {cores} cores: the model shares the cores' time among them"
                     + (f" and charges {factor:.2f}x for crowding them" if costs.crowding_at > 1 else
                        " and charges nothing for switching between them (the calibration's ranks had their own "
                        "cores: not measured; checked on 2 cores before it was: 8 processes ran 22 % slower than "
                        "predicted)"))
    return words


def _growth_words(costs: Costs) -> str:
    measured = [(n, v) for n, v in ((1, costs.rss_train1_per_row), (2, costs.rss_train_per_row),
                                    (4, costs.rss_train_peers_per_row)) if v > 0]
    if not measured:
        return "memory: the peak's growth while training a constant per rank (the job did not split its RSS)"
    several = ("from 3 ranks on, the 4-rank figure, assumed to hold for more peers" if costs.rss_train_peers_per_row
               else "from 3 ranks on, the 2-rank figure: no 4-rank calibration run")
    figures = ", ".join(f"{v * 1024:.2f} KiB at {n} rank{'s' if n > 1 else ''}" for n, v in measured)
    return f"memory: the peak's growth while training per row of a batch {figures} ({several})"


def _worker_words(args, costs: Costs) -> str:
    w = costs.workers if args.num_workers else {}
    if not w:
        return "no sampler workers"
    kib = {k: v * 1024 for k, v in w.items() if k.endswith("_per_row")}
    return (f"{args.num_workers} sampler worker(s) a rank (one thread each; measured with one worker a rank: "
            f"{w['w_recv'] * 1e9:.0f} ns a row for the trainer to take a batch over, a worker's own memory "
            f"{kib['worker1_per_row']:.2f} / {kib['worker_per_row']:.2f} KiB a row at 1 / 2 ranks, the trainer's "
            f"growth beside it {kib['trainer1_per_row']:.2f} / {kib['trainer_per_row']:.2f}; from 3 ranks on the "
            "trainer's scaled as without workers)")


def _cache_words(args) -> str:
    if not args.cache_ratio:
        return "no feature cache"
    return (f"a degree feature cache of {args.cache_ratio:g} of a partition's own rows (replayed: the remote rows "
            "its owned nodes link to most)")


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


def machine_speed(args, costs: Costs, counts, say) -> Optional[float]:
    """How much slower this machine runs the calibration's 1-rank, 1-thread batch now than the costs say (a short
    run of it, ``--steps`` batches after ``--warmup``; ``1.1``: 10 % slower): machines of this kind drift by up to
    30 % over minutes, so each check row is measured beside it. ``None`` without ``<work>/parts-1``."""
    one = Path(args.work) / "parts-1"
    if 1 not in counts or not (one / "META.json").exists():
        return None
    run = cal.run_job(one, 1, 1, Path(args.work) / "speed.jsonl", job_args(args, calibration=True),
                      steps=args.steps, warmup=args.warmup)
    now = sum(v for k, v in run.per_batch().items() if k in STAGES)
    then = sum(predict(costs, counts[1], Machines(1), args.batch_size).ms.values()) / 1e3
    speed = now / then if then > 0 else None
    if speed is not None:
        say(f"this machine now: {now * 1e3:.0f} ms per calibration batch, {speed - 1:+.0%} against the calibration")
    return speed


def check(args, costs: Costs, counts, cores: int, say) -> List[dict]:
    """Runs the job for each :func:`check_rows` row, each after :func:`machine_speed`; predicted against measured
    epochs (and the prediction at the machine's speed of the moment: ``error_at_speed``)."""
    out = []
    for ranks, gbps in check_rows(args):
        speed = machine_speed(args, costs, counts, say)
        m = Machines(ranks, 1, cores, gbps, emulated=True, workers=args.num_workers)
        pred, threads = predict(costs, counts[ranks], m, args.batch_size), m.threads
        run = cal.run_job(folder(args, ranks, say), ranks, threads, Path(args.work) / f"check_{ranks}_{gbps}.jsonl",
                          job_args(args), steps=args.check_steps, warmup=args.check_warmup, link_gbps=gbps)
        batches = int(run.record["ranks"][0]["batches"])
        scale = batches / pred.batches  # --check-steps: the epoch predicted for the batches run
        w = costs.workers if args.num_workers else {}
        cold = 0.0 if args.check_warmup else w.get("cold_s", costs.cold_s)
        end = w.get("epoch_other", costs.epoch_other)
        predicted = (pred.epoch_s - end) * scale + end + cold
        measured, got = run.wall_s, run.per_batch()
        if args.num_workers:  # the workers' CPU beyond their timed stages: handing the batch over, in assemble
            got["assemble"] += max(run.workers_cpu_per_batch() - got["sample"] - got["rows"] - got["assemble"], 0.0)
        rss = got["rss_mb"]
        out.append({"ranks": ranks, "link_gbps": gbps, "threads": threads, "workers": args.num_workers,
                    "batches": batches,
                    "predicted_s": predicted, "measured_s": measured, "error": predicted / measured - 1,
                    "predicted_rss_mb": pred.rss_mb, "measured_rss_mb": rss,
                    "rss_error": pred.rss_mb / max(rss, 1e-9) - 1,
                    "huge_pages_ranks": int(run.facts.get("huge_pages_ranks", ranks)),
                    "predicted_cache_rows": counts[ranks].cache_rows,
                    "measured_cache_rows": run.fact("cache_rows"),
                    "measured_open_anon_mb": got.get("open_anon_mb"), "measured_end_file_mb": got.get("end_file_mb"),
                    "predicted_ms": dict(pred.ms), "measured_ms": {k: got[k] * 1e3 for k in STAGES},
                    "machine_speed": speed,
                    "error_at_speed": predicted * speed / measured - 1 if speed is not None else None})
        say(f"check {_who(out[-1])} rank(s){'' if gbps is None else f' at {gbps:g} Gb/s'}: predicted "
            f"{predicted:.1f} s, measured {measured:.1f} s ({predicted / measured - 1:+.0%})")
    return out


def _who(row: dict) -> str:
    """``2``, or with sampler workers ``2 (+1 worker each)``."""
    w = row.get("workers") or 0
    return f"{row['ranks']}" if not w else f"{row['ranks']} (+{w} worker{'s' if w > 1 else ''} each)"


def check_table(rows: List[dict]) -> str:
    """The ``--check`` rows as a Markdown table (with the feature cache's rows, replayed against filled, when the
    job had one)."""
    cache = any(r.get("measured_cache_rows") for r in rows)
    lines = ["| ranks here | link | batches/rank | predicted s | measured s | error | calibration batch now vs then | "
             "error at its speed | predicted RSS MiB | measured RSS MiB | RSS error |"
             + (" cache rows replayed / filled |" if cache else ""),
             "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if cache else "")]
    for r in rows:
        link = "loopback" if r["link_gbps"] is None else f"{r['link_gbps']:g} Gb/s (emulated)"
        rows_cell = f" {r.get('predicted_cache_rows', 0):,.0f} / {r.get('measured_cache_rows', 0):,.0f} |" \
            if cache else ""
        speed = r.get("machine_speed")
        drift = f"{speed - 1:+.0%} | {r['error_at_speed']:+.0%}" if speed is not None else "- | -"
        lines.append(f"| {_who(r)} | {link} | {r['batches']} | {r['predicted_s']:.1f} | {r['measured_s']:.1f} | "
                     f"{r['error']:+.0%} | {drift} | {r['predicted_rss_mb']:.0f} | {r['measured_rss_mb']:.0f} | "
                     f"{r['rss_error']:+.0%} |{rows_cell}")
    return "\n".join(lines)


def stage_table(rows: List[dict]) -> str:
    """Where a checked batch's time went, predicted / measured ms per stage (the means over ranks; ``other``: the
    loader's wait beyond the timed stages), so a miss names its stage."""
    lines = ["| ranks here | link | " + " | ".join(f"{s} ms predicted / measured" for s in STAGES) + " |",
             "|---|---|" + "---|" * len(STAGES)]
    for r in rows:
        link = "loopback" if r["link_gbps"] is None else f"{r['link_gbps']:g} Gb/s (emulated)"
        cells = " | ".join(f"{r['predicted_ms'][s]:.1f} / {r['measured_ms'][s]:.1f}" for s in STAGES)
        lines.append(f"| {_who(r)} | {link} | {cells} |")
    return "\n".join(lines)


def chart(rows: List[Prediction], path: str) -> Path:
    """Two panels: each row's epoch seconds split by stage, and its speed-up over one machine."""
    from pyg_dist.partition.plot import grouped_bars, new_figure, save_png
    fig, (left, right) = new_figure(2, "pyg-dist-plan: predicted epoch")
    names = [f"{r.machines}" for r in rows]
    bottom = [0.0] * len(rows)
    for s in STAGES:  # each stage's share of the batch (sampler workers overlap the step: shares, not sums)
        secs = [r.ms[s] / max(sum(r.ms.values()), 1e-9) * (r.batch_ms or sum(r.ms.values())) * r.batches / 1e3
                for r in rows]
        left.bar(names, secs, bottom=bottom, label=s)
        bottom = [b + v for b, v in zip(bottom, secs)]
    left.set_title("epoch seconds by stage", fontsize=10)
    left.set_xlabel("machines", fontsize=8)
    left.legend(fontsize=7, frameon=False)
    grouped_bars(right, names, {"speed-up": [r.speedup for r in rows]}, "speed-up over 1 machine")
    right.set_xlabel("machines", fontsize=8)
    return save_png(fig, path)


__all__ = ["run", "chart", "CHECK_ROWS", "check_rows", "all_counts", "get_costs", "plan_rows", "table",
           "assumptions", "check", "check_table", "stage_table", "machine_gb", "fits", "fit_line",
           "machine_speed"]
