"""Calibration: short runs of the planner's job (:mod:`.job`) on this machine, and the unit costs they fit.

Four runs (six with sampler workers) of ``steps`` batches each (after ``warmup`` batches; ``repeats`` rounds of
them, interleaved), over partition folders of 1, 2 and 4 parts (:data:`PARTS`):

- 1 rank, 1 thread: the one-thread cost of each stage per sampled edge or row (``u_*``), the step per batch;
- 1 rank, 2 threads (when this machine has 2 cores or more): how much a second thread saves (Amdahl's serial
  fraction ``phi`` of each stage);
- 2 ranks, 1 thread each: what a remote sampled edge and a remote row add over a local one (``h_edge``,
  ``h_row``, after the calls' latency ``lat``, measured by timed empty calls between the ranks) and what
  DDP adds to a step (``ddp``);
- 4 ranks, 1 thread each: the peak's growth per row when a rank fetches from and serves several peers (about
  twice that of one peer, :mod:`.model`); its times fit no unit cost, but where its ranks outnumber this
  machine's cores, their batch against the model's gives what crowding the cores costs beyond sharing their
  time (:func:`fit_crowding`: switching, peers' calls waiting for a core);
- with ``--num-workers`` (``workers=True``): 1 rank and 2 ranks with one sampler worker each: the workers'
  one-thread costs, the trainer's cost to take a batch over, and the memory of a trainer and of a worker
  (:func:`fit_workers`; the 2-rank run's times are not used).

The runs have no feature cache (the costs are per row fetched, whatever the cache: one calibration plans any
``--cache-ratio``) and fetch remote rows the job's way (``--remote-rows``: int8's encoding is inside ``h_row``).

Each run's stage seconds are those of the job's epoch clock (:class:`~pyg_dist.train.stages.EpochClock`), the
counts those of the offline replay (:mod:`.replay`), and the memory (:func:`fit_rss`) the ranks' own memory at
their first batch and their mapped files' pages after training, each against the bytes of their partitions (the
node and edge files of the 1-part folder), plus the peak's own growth while training per row of a batch.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from pyg_dist._alloc import launch_env
from pyg_dist.errors import InvalidArgumentError, PyGDistError
from pyg_dist.plan.model import STAGES, Costs, Machines, predict
from pyg_dist.plan.replay import Counts

#: The part counts the calibration runs on (its partition folders).
PARTS = (1, 2, 4)


class JobFailedError(PyGDistError):
    """A run of the planner's job exited non-zero (the message holds the end of its output)."""


@dataclass
class Run:
    """One run of the job: its last epoch's record (``ranks``: per rank stage seconds and counts) and facts."""
    ranks: int
    threads: int
    record: dict
    facts: dict
    seconds: float
    link_gbps: Optional[float] = None
    cold_s: float = 0.0  # how much longer the first epoch took than its batches at the last one's rate

    def per_batch(self) -> Dict[str, float]:
        """Mean over ranks of seconds per batch: ``sample``, ``rows``, ``assemble``, ``step``, ``other`` (the
        loader's own time: wait not spent in a timed stage; with sampler workers, the trainer's whole wait: taking
        the batch over), and ``epoch_other`` (per epoch); the memory of the rank with the highest peak
        (:meth:`rank_memory`)."""
        out: Dict[str, float] = {k: 0.0 for k in ("sample", "rows", "assemble", "step", "other", "epoch_other")}
        workers = self.fact("num_workers") > 0
        for r in self.record["ranks"]:
            b = max(r["batches"], 1)
            stages = {"sample": r["sample_local"] + r["sample_remote"], "rows": r["rows_local"] + r["rows_remote"],
                      "assemble": r["assemble"], "step": r["step"]}
            busy = 0.0 if workers else stages["sample"] + stages["rows"] + stages["assemble"]
            stages["other"] = max(r["wait"] - busy, 0.0)
            for k, v in stages.items():
                out[k] += v / b / len(self.record["ranks"])
            out["epoch_other"] += r["other"] / len(self.record["ranks"])
        mem = self.rank_memory()
        top = max(range(len(mem)), key=lambda i: mem[i]["rss_mb"] or 0.0)  # the rank with the highest peak
        out.update({k: v for k, v in mem[top].items() if v is not None})
        out["open_rss_mb"] = max(self.facts.get("open_rss_mb") or [out["rss_mb"]])
        return out

    def rank_memory(self) -> List[Dict[str, Optional[float]]]:
        """Per rank, MiB: ``rss_mb`` (the trainer's peak RSS plus, with sampler workers, their own memory and the
        pages of mapped files they hold beyond the trainer's: :func:`pyg_dist.plan.job.worker_memory_mb`),
        ``open_anon_mb`` (the trainer's own memory at the first batch), ``end_file_mb`` (pages of mapped files
        after training, the trainer's or a worker's, the most) and ``workers_mb`` (the workers' own); ``None``
        where the job did not say."""
        def value(key: str, i: int) -> Optional[float]:
            values = self.facts.get(key)
            if isinstance(values, list) and len(values) > i and isinstance(values[i], (int, float)):
                return float(values[i])
            return None
        out = []
        for i, r in enumerate(self.record["ranks"]):
            own, wfile, tfile = value("workers_mb", i) or 0.0, value("workers_file_mb", i) or 0.0, \
                value("end_file_mb", i)
            extra = max(wfile - tfile, 0.0) if tfile is not None else 0.0
            out.append({"rss_mb": r.get("peak_rss_mb", 0.0) + own + extra, "open_anon_mb": value("open_anon_mb", i),
                        "end_file_mb": None if tfile is None else tfile + extra, "workers_mb": own})
        return out

    def workers_cpu_batches(self) -> float:
        """The batches the workers' CPU seconds of the last epoch were spent on: the epoch's, and, when it was cut
        short (``--max-steps``), the two a worker prefetches beyond it (torch's ``prefetch_factor``)."""
        if "workers_cpu_batches" in self.facts:  # merged repeats (:func:`merge`)
            return self.fact("workers_cpu_batches")
        batches = float(self.record["ranks"][0]["batches"])
        cut = self.fact("batches_per_epoch", batches) > batches
        return batches + (2 * self.fact("num_workers") if cut else 0.0)

    def workers_cpu_per_batch(self) -> float:
        """The sampler workers' CPU seconds per batch, the mean over ranks (0.0 without workers or the figure)."""
        cpu = self.facts.get("workers_cpu_s")
        if not isinstance(cpu, list) or not cpu:
            return 0.0
        good = [float(c) for c in cpu if isinstance(c, (int, float)) and not isinstance(c, bool) and c >= 0]
        return sum(good) / max(len(good), 1) / max(self.workers_cpu_batches(), 1.0)

    def fact(self, key: str, default: float = 0.0) -> float:
        """A number of the job's facts (the largest, for a per-rank list); ``default`` where it is absent or
        not a finite number >= 0."""
        import math
        value = self.facts.get(key)
        values = value if isinstance(value, list) else [value]
        good = [float(v) for v in values if not isinstance(v, bool) and isinstance(v, (int, float))
                and math.isfinite(v) and v >= 0]
        return max(good) if good else default

    @property
    def wall_s(self) -> float:
        return float(self.record["wall_s"])


def run_job(folder: Path, ranks: int, threads: int, record: Path, job_args: Sequence[str], *, epochs: int = 1,
            steps: int = 0, warmup: int = 0, link_gbps: Optional[float] = None, timeout: float = 3600.0) -> Run:
    """Runs :mod:`.job` under ``torch.distributed.run`` on this machine (``warmup`` batches first, then
    ``epochs`` epochs of ``steps`` batches, 0: whole epochs); returns its last epoch."""
    for p in (record, Path(f"{record}.job.json")):
        p.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
           "-m", "pyg_dist.plan.job", "--partition-dir", str(folder), "--record", str(record),
           "--epochs", str(epochs), "--max-steps", str(steps), "--warmup-steps", str(warmup), *job_args]
    if link_gbps:
        cmd += ["--link-gbps", str(link_gbps)]
    env = job_env(threads, job_args)
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise JobFailedError(f"the planner's job ({ranks} ranks on {folder}) ran past {timeout:.0f} s") from None
    if proc.returncode != 0 or not record.exists():
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise JobFailedError(f"the planner's job ({ranks} ranks on {folder}) exited {proc.returncode}:\n{tail}")
    first, last, facts, lines = _read_outputs(record)
    cold = 0.0
    if len(lines) > 1:  # the first epoch's excess over its batches at the last epoch's rate
        rate = last["wall_s"] / max(last["ranks"][0]["batches"], 1)
        cold = max(first["wall_s"] - rate * first["ranks"][0]["batches"], 0.0)
    return Run(ranks, threads, last, facts, time.perf_counter() - start, link_gbps, cold)


def job_env(threads: int, job_args: Sequence[str]) -> Dict[str, str]:
    """The job's environment: ``threads`` OpenMP threads, torch's huge pages from the start
    (:func:`~pyg_dist._alloc.launch_env`), and the GPUs hidden unless the job's own arguments say ``--device
    cuda`` (``pyg-dist-plan --gpu``): a job planned for CPU machines never lands on this machine's GPU."""
    args = list(job_args)
    on_gpu = any(a == "--device" and args[i + 1:i + 2] == ["cuda"] for i, a in enumerate(args))
    env = dict(launch_env(), OMP_NUM_THREADS=str(threads))
    if not on_gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _read_outputs(record: Path):
    """The job's first and last epoch records, its facts and its record lines; a file that is not what the job
    writes raises :class:`JobFailedError` naming it."""
    facts_path = Path(f"{record}.job.json")
    for path in (record, facts_path):
        try:
            lines = path.read_text().strip().splitlines()
            docs = [json.loads(line) for line in lines] if path == record else [json.loads("\n".join(lines))]
        except (OSError, ValueError) as exc:
            raise JobFailedError(f"the planner's job wrote an unreadable {path}: {exc}") from None
        if not docs or not all(isinstance(d, dict) for d in docs) or \
                (path == record and not all(isinstance(d.get("ranks"), list) and d["ranks"] for d in docs)):
            raise JobFailedError(f"the planner's job wrote {path} without the expected JSON objects")
        if path == record:
            first, last, record_lines = docs[0], docs[-1], lines
    return first, last, docs[0], record_lines


def folder_bytes(folder: Path) -> Dict[str, int]:
    """Bytes of the node files (features, labels, masks) and of the edge files (the graph) of a 1-part folder."""
    part = Path(folder) / "part_0"
    if not part.is_dir():
        raise InvalidArgumentError("folder_bytes", "folder", str(folder), "a partition folder with part_0/")
    sizes = {"node_bytes": 0, "edge_bytes": 0}
    for f in part.rglob("*"):
        if f.is_file():
            sizes["edge_bytes" if f.name.startswith(("graph", "edge")) else "node_bytes"] += f.stat().st_size
    return sizes


def fit(one: Run, one_two: Optional[Run], two: Run, c1: Counts, c2: Counts, sizes: Dict[str, int],
        four: Optional[Run] = None, c4: Optional[Counts] = None, cores: int = 0) -> Costs:
    """The unit costs of :mod:`.model` from the calibration runs and the replayed counts (``four``, ``c4``: the
    4-rank run and its counts, for the memory with several peers, and, where its ranks outnumbered the ``cores``
    it ran on, for the crowding: :func:`fit_crowding`; without them, the 2-rank growth is used, no crowding)."""
    a, b = one.per_batch(), two.per_batch()
    lat = float(two.facts.get("call_latency_s", 0.0))
    phi = {s: 1.0 for s in ("sample", "rows", "assemble", "step")}
    if one_two is not None:
        c = one_two.per_batch()
        phi = {s: min(max(2 * c[s] / a[s] - 1, 0.0), 1.0) if a[s] > 0 else 1.0 for s in phi}
    e_rem, r_rem = c2.edges * c2.remote_edge_frac, c2.rows * c2.fetched_row_frac
    costs = Costs(u_edge=a["sample"] / c1.edges, u_row=a["rows"] / c1.rows, u_asm=a["assemble"] / c1.rows,
                  u_step=a["step"] / c1.rows, u_other=a["other"], lat=lat, phi=phi, epoch_other=a["epoch_other"],
                  row_bytes=int(one.facts["row_bytes"]), wire_row_bytes=int(two.fact("wire_row_bytes")),
                  train_seeds=int(one.facts["train_seeds"]),
                  params=int(one.facts["params"]), cold_s=(one.cold_s + two.cold_s) / 2,
                  huge_pages=huge_pages_share([r for r in (one, one_two, two) if r is not None]),
                  gpu=gpu_share([r for r in (one, one_two, two) if r is not None]),
                  node_bytes=sizes["node_bytes"], edge_bytes=sizes["edge_bytes"])
    costs.h_edge = max(b["sample"] - costs.u_edge * c2.edges - lat * c2.hop_calls, 0.0) / max(e_rem, 1.0)
    costs.h_row = max(b["rows"] - costs.u_row * c2.rows - lat * c2.row_calls, 0.0) / max(r_rem, 1.0)
    costs.ddp = max(b["step"] - costs.u_step * c2.rows, 0.0)
    fit_rss(costs, a, b, c1, c2, sizes)
    if four is not None and c4 is not None:
        costs.rss_train_peers_per_row = growth_mb(four.per_batch()) / max(c4.rows, 1.0)
        fit_crowding(costs, four, c4, cores)
    return costs


def fit_crowding(costs: Costs, four: Run, c4: Counts, cores: int) -> None:
    """Sets ``costs.crowding`` / ``crowding_at`` where the 4-rank run's ranks outnumbered the ``cores`` it ran on:
    its measured batch (the mean over ranks of the stages' sum) over the one the model gives it, sharing the
    cores' time alone (at least 1.0); nothing where they did not."""
    if four.ranks <= cores or cores < 1:
        return
    b = four.per_batch()
    measured = sum(b[s] for s in STAGES)
    model = predict(costs, c4, Machines(four.ranks, 1, cores), batch_size=1).batch_ms / 1e3  # a batch: any size
    if model > 0:
        costs.crowding, costs.crowding_at = max(measured / model, 1.0), four.ranks / cores


def fit_workers(costs: Costs, one: Run, two: Run, c1: Counts, c2: Counts, sizes: Dict[str, int]) -> Dict[str, float]:
    """The sampler workers' costs (:data:`~.model.WORKER_COSTS`) from the runs with one worker a rank: 1 rank
    (the worker's one-thread costs per sampled edge and row; the trainer's wait for a batch beyond the worker's
    lag, per row: taking it over) and 2 ranks (memory only: four processes on this machine's cores)."""
    from dataclasses import replace
    a, b = one.per_batch(), two.per_batch()
    timed = a["sample"] + a["rows"] + a["assemble"]
    lag = max(timed - a["step"], 0.0)  # the trainer idles while the worker lags
    untimed = max(one.workers_cpu_per_batch() - timed, 0.0)  # the worker hands the batch over: its CPU beyond
    out = {"w_edge": a["sample"] / c1.edges, "w_row": a["rows"] / c1.rows,
           "w_asm": (a["assemble"] + untimed) / c1.rows,
           "w_recv": max(a["other"] - lag, 0.0) / c1.rows, "epoch_other": a["epoch_other"],
           "cold_s": (one.cold_s + two.cold_s) / 2}
    terms = replace(costs)
    fit_rss(terms, a, b, c1, c2, sizes)
    out.update({k: getattr(terms, k) for k in ("rss_base_mb", "rss_per_byte", "rss_file_base_mb", "rss_file_per_byte")})
    for run, counts, suffix in ((a, c1, "1_per_row"), (b, c2, "_per_row")):
        own = run.get("workers_mb", 0.0) / max(one.fact("num_workers", 1.0), 1.0)
        out["worker" + suffix] = own / max(counts.rows, 1.0)
        out["trainer" + suffix] = max(growth_mb(run) - run.get("workers_mb", 0.0), 0.0) / max(counts.rows, 1.0)
    return out


def growth_mb(run: Dict[str, float]) -> float:
    """The peak's own growth while training (MiB) of a run's per-batch figures: its peak less its own memory at
    the first batch and its mapped files' pages after training (0 where the job did not split its RSS)."""
    if "open_anon_mb" not in run or "end_file_mb" not in run:
        return 0.0
    return max(run["rss_mb"] - run["open_anon_mb"] - run["end_file_mb"], 0.0)


def _line(y1: float, y2: float, x1: float, x2: float) -> Tuple[float, float]:
    """``(base, per_byte)`` of the line through ``(x1, y1)`` and ``(x2, y2)`` (bytes, MiB) where it rises from
    ``x2`` to ``x1``; else the memory does not grow with the bytes measurably (run-to-run noise is larger): flat,
    at the larger of the two."""
    if x1 > x2 and y1 > y2:
        per_byte = (y1 - y2) / ((x1 - x2) / 2**20)
        return y1 - per_byte * x1 / 2**20, per_byte
    return max(y1, y2), 0.0


def fit_rss(costs: Costs, a: Dict[str, float], b: Dict[str, float], c1: Counts, c2: Counts,
            sizes: Dict[str, int]) -> None:
    """The memory terms of ``costs`` from the 1- and 2-rank runs' per-batch figures ``a``, ``b``: where the jobs
    split their RSS, own memory at the first batch and mapped files' pages after training as lines through the
    partitions' bytes, and the peak's growth per row of a batch; else one line through the RSS at the first
    batch and the growth as a constant."""
    p1 = sizes["node_bytes"] + sizes["edge_bytes"]
    p2 = sizes["node_bytes"] * c2.max_nodes_frac + sizes["edge_bytes"] * c2.max_edges_frac
    if all(k in a and k in b for k in ("open_anon_mb", "end_file_mb")):
        costs.rss_base_mb, costs.rss_per_byte = _line(a["open_anon_mb"], b["open_anon_mb"], p1, p2)
        costs.rss_file_base_mb, costs.rss_file_per_byte = _line(a["end_file_mb"], b["end_file_mb"], p1, p2)
        grow1, grow2 = growth_mb(a), growth_mb(b)
        costs.rss_train1_mb, costs.rss_train_mb = grow1, grow2
        costs.rss_train1_per_row, costs.rss_train_per_row = grow1 / max(c1.rows, 1.0), grow2 / max(c2.rows, 1.0)
        return
    costs.rss_base_mb, costs.rss_per_byte = _line(a["open_rss_mb"], b["open_rss_mb"], p1, p2)
    costs.rss_train1_mb, costs.rss_train_mb = a["rss_mb"] - a["open_rss_mb"], b["rss_mb"] - b["open_rss_mb"]


def gpu_share(runs: List[Run]) -> float:
    """The share of the runs' ranks that trained on a GPU (0.0 where the job did not say: it hid them)."""
    lists = [r.facts.get("gpu") for r in runs]
    ranks = [g for values in lists if isinstance(values, list) for g in values if isinstance(g, (int, float))]
    return sum(1.0 for g in ranks if g > 0) / len(ranks) if ranks else 0.0


def huge_pages_share(runs: List[Run]) -> float:
    """The share of the runs' ranks where torch used huge pages (1.0 where the job did not say)."""
    ranks = sum(r.ranks for r in runs)
    return sum(r.facts.get("huge_pages_ranks", r.ranks) for r in runs) / max(ranks, 1)


def merge(runs: List[Run]) -> Run:
    """One run from repeats of the same configuration: stage seconds and batches summed per rank (so per-batch
    means weigh every batch alike), peak RSS the largest, the start-up cost the mean, huge pages the fewest."""
    ranks = []
    for i in range(len(runs[0].record["ranks"])):
        entries = [r.record["ranks"][i] for r in runs]
        merged = {k: sum(e[k] for e in entries) for k, v in entries[0].items() if isinstance(v, (int, float))}
        merged["peak_rss_mb"] = max(e.get("peak_rss_mb", 0.0) for e in entries)
        ranks.append(merged)
    record = {"wall_s": sum(r.record["wall_s"] for r in runs), "ranks": ranks}
    facts = dict(runs[-1].facts, huge_pages_ranks=min(r.facts.get("huge_pages_ranks", r.ranks) for r in runs))
    if all(isinstance(r.facts.get("workers_cpu_s"), list) for r in runs):  # the workers' CPU, over all repeats
        facts["workers_cpu_s"] = [sum(v) for v in zip(*(r.facts["workers_cpu_s"] for r in runs))]
        facts["workers_cpu_batches"] = sum(r.workers_cpu_batches() for r in runs)
    return Run(runs[0].ranks, runs[0].threads, record, facts, sum(r.seconds for r in runs),
               runs[0].link_gbps, sum(r.cold_s for r in runs) / len(runs))


def calibrate(folders: Dict[int, Path], counts: Dict[int, Counts], work: Path, job_args: List[str], steps: int,
              cores: int, say=print, warmup: int = 5, repeats: int = 2, workers: bool = False) -> Costs:
    """Runs the calibration runs (module docstring) ``repeats`` times, interleaved (this kind of machine
    drifts over minutes), and fits :class:`~.model.Costs` to their merged batches. ``folders``: one per
    :data:`PARTS` (without a 4-part folder, no 4-rank run); ``workers``: also the runs with one sampler worker a
    rank (1 and 2 ranks: :func:`fit_workers`)."""
    plan = [("1x1", 1, 1, 0), ("1x2", 1, 2, 0), ("2x1", 2, 1, 0), ("4x1", 4, 1, 0)]
    plan += [("1x1w", 1, 1, 1), ("2x1w", 2, 1, 1)] if workers else []
    runs: Dict[str, List[Run]] = {name: [] for name, *_ in plan}
    for _ in range(repeats):
        for name, ranks, threads, w in plan:
            if threads > cores or ranks not in folders:
                continue
            t = time.perf_counter()
            extra = ["--num-workers", str(w)] if w else []
            runs[name].append(run_job(folders[ranks], ranks, threads, work / f"cal_{name}_{len(runs[name])}.jsonl",
                                      [*job_args, *extra], steps=steps, warmup=warmup))
            say(f"calibration run {ranks} rank(s) x {threads} thread(s){f' x {w} worker' if w else ''}: "
                f"{time.perf_counter() - t:.1f} s")
    one_two = merge(runs["1x2"]) if runs["1x2"] else None
    four = merge(runs["4x1"]) if runs["4x1"] else None
    sizes = folder_bytes(folders[1])
    costs = fit(merge(runs["1x1"]), one_two, merge(runs["2x1"]), counts[1], counts[2], sizes, four, counts.get(4),
                cores)
    if workers:
        costs.workers = fit_workers(costs, merge(runs["1x1w"]), merge(runs["2x1w"]), counts[1], counts[2], sizes)
    return costs


__all__ = ["PARTS", "JobFailedError", "Run", "run_job", "job_env", "gpu_share", "folder_bytes", "fit", "fit_workers",
           "fit_crowding", "growth_mb", "merge", "calibrate"]
