"""Width on one machine: one training job at 8, 16, 32 and 64 processes (trainers only, and trainers x sampler
workers), what it costs per process, and whether every seed is trained exactly once.

Each row is one ``torchrun --standalone`` job on a generated graph (``--num-nodes``, partitioned into one part per
trainer, METIS, cached under ``--cache-dir``): every rank opens its partition (``dist_session``), builds a
``DistNeighborLoader`` over its training seeds (``--workers`` sampler workers each), trains a 2-layer GraphSAGE
for one epoch, and leaves. The bench watches every process of the job through ``/proc`` (twice a second) and
each rank writes its own timeline. Prints ONE table, one row per job:

- ``procs``: processes in the RPC world (trainers x (1 + workers)); ``exit``: the job's exit code;
- ``launch->batch s``: launch to the first batch (slowest rank), ``start cpu s/proc``: the CPU seconds a trainer
  spent until its first batch (mean over trainers: the per-process cost of starting, which on a 2-core machine
  is what must not grow with width while the wall time does), split into ``import / session / batch``: the
  interpreter and the libraries' imports (nothing of pyg_dist runs yet: what the machine's contention alone
  does to a process), ``dist_session`` (process group, partition, RPC world), the loader and its first batch;
  ``session steps s``: the slowest rank's wall seconds in each of ``dist_session``'s start-up steps
  (``DistEnv.startup_seconds``: world, local, group, open, rpc, caches);
  ``epoch s`` (slowest rank), ``shutdown s`` (the
  slowest rank's end of epoch to leaving ``dist_session``: workers stopped, RPC and the process group left),
  ``exit s`` (the last rank leaving ``dist_session`` to the job's exit: interpreters ending, torchrun's agent);
- per process, the largest over the job's processes: ``threads``, ``open files``, ``sockets``, ``RSS MB``;
- ``seeds``: ``once`` when the union of the ranks' batches is every training node exactly once, else what is
  missing / repeated.

    python scripts/bench_scale.py                                   # 8, 16, 32, 64 trainers and 16 x 3
    python scripts/bench_scale.py --rows 4,2x1 --num-nodes 8000     # a quick look
    python scripts/bench_scale.py --json scale.json                 # also the rows as JSON
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Tuple

_CLK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid="self") -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK


def rank_main(args) -> None:
    """One trainer of the job (``--rank-main``): open, one epoch, write the timeline and seeds."""
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GraphSAGE

    from pyg_dist import DistNeighborLoader, TrainConfig, dist_session, wrap_ddp
    out = Path(args.out)
    times: Dict[str, float] = {"import_cpu": _cpu_seconds()}  # the interpreter and the libraries, nothing of ours
    with dist_session(TrainConfig(args.partition_dir, num_workers=args.workers)) as env:
        times["opened"], times["open_cpu"] = time.time(), _cpu_seconds()
        times.update({f"step_{k}": v for k, v in env.startup_seconds.items()})  # dist_session's own clock
        loader = DistNeighborLoader(env, [10, 5], input_nodes="train_mask", batch_size=256, shuffle=True,
                                    num_workers=args.workers, seed=0)
        model = wrap_ddp(GraphSAGE(env.num_features(None), 64,
                                   2, env.num_classes(None)), env)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        seeds = []
        try:
            for i, batch in enumerate(loader):
                if i == 0:
                    times["first_batch"], times["start_cpu"] = time.time(), _cpu_seconds()
                opt.zero_grad()
                loss = F.cross_entropy(model(batch.x, batch.edge_index)[:batch.batch_size], batch.y[:batch.batch_size])
                loss.backward()
                opt.step()
                seeds.append(batch.n_id[:batch.batch_size])
            times["epoch_end"] = time.time()
            times.setdefault("first_batch", times["epoch_end"])
            times.setdefault("start_cpu", _cpu_seconds())
        finally:
            loader.shutdown()
        owned = env.feature_store.get_global_id(None, mask="train_mask")
        rank = env.rank
    times["left"] = time.time()
    torch.save({"seeds": torch.cat(seeds) if seeds else torch.zeros(0, dtype=torch.long), "owned": owned,
                "times": times}, out / f"rank{rank}.pt")


def _partition(num_nodes: int, parts: int, cache: Path) -> Path:
    import pyg_dist
    from pyg_dist.partition import Partitioner
    root = cache / f"scale-{num_nodes}-{parts}"
    if not (root / "META.json").is_file():
        data = pyg_dist.synthetic_graph(num_nodes, 10, num_features=32, num_classes=8, seed=0)
        Partitioner(data, parts).save(root, overwrite=True, progress=False)
    return root


class Watch:
    """Polls every process below ``root`` (the launcher) through ``/proc``; keeps per pid the largest threads,
    open files, sockets and RSS seen."""

    def __init__(self, root: int, period: float = 0.5):
        self.root, self.period = root, period
        self.peak: Dict[int, Dict[str, int]] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _children(self) -> List[int]:
        kids: Dict[int, List[int]] = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                kids.setdefault(ppid, []).append(int(d))
        out, todo = [], [self.root]
        while todo:
            p = todo.pop()
            for c in kids.get(p, []):
                out.append(c)
                todo.append(c)
        return out

    @staticmethod
    def _sample(pid: int) -> Dict[str, int]:
        status = Path(f"/proc/{pid}/status").read_text()
        fields = {ln.split(":")[0]: ln.split(":")[1].split() for ln in status.splitlines() if ":" in ln}
        fds = os.listdir(f"/proc/{pid}/fd")
        socks = 0
        for fd in fds:
            try:
                socks += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
            except OSError:
                pass
        mb = lambda key: int(fields.get(key, ["0"])[0]) // 1024  # noqa: E731
        return {"threads": int(fields["Threads"][0]), "files": len(fds), "sockets": socks, "rss_mb": mb("VmRSS"),
                "anon_mb": mb("RssAnon"), "file_mb": mb("RssFile"), "swap_mb": mb("VmSwap")}

    def _run(self) -> None:
        while not self.stop.is_set():
            for pid in self._children():
                try:
                    s = self._sample(pid)
                    if "python" not in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                        continue
                except (OSError, KeyError, IndexError):
                    continue
                peak = self.peak.setdefault(pid, s)
                for k, v in s.items():
                    peak[k] = max(peak[k], v)
            self.stop.wait(self.period)

    def close(self, keys=("threads", "files", "sockets", "rss_mb")) -> Dict[str, int]:
        """Stops watching; the largest value of each of ``keys`` over the processes seen."""
        self.stop.set()
        self.thread.join()
        return {k: max((p[k] for p in self.peak.values()), default=0) for k in keys}


def _seed_check(out: Path, trainers: int) -> Tuple[str, Dict[int, Dict[str, float]]]:
    import torch
    got, want, times = [], [], {}
    for r in range(trainers):
        f = out / f"rank{r}.pt"
        if not f.is_file():
            return f"rank {r} wrote nothing", times
        d = torch.load(f, weights_only=True)
        got.append(d["seeds"])
        want.append(d["owned"])
        times[r] = d["times"]
    got, want = torch.cat(got).sort().values, torch.cat(want).unique().sort().values
    if torch.equal(got, want):
        return "once", times
    counts = torch.bincount(got, minlength=int(want.max()) + 1 if want.numel() else 0)
    missing = int((counts[want] == 0).sum())
    return f"{missing} missing, {int((counts > 1).sum())} repeated", times


def run_row(trainers: int, workers: int, args) -> Dict[str, object]:
    root = _partition(args.num_nodes, trainers, Path(args.cache_dir))
    out = Path(args.cache_dir) / f"scale-run-{trainers}x{workers}"
    out.mkdir(parents=True, exist_ok=True)
    for f in out.glob("rank*.pt"):
        f.unlink()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(trainers),
           __file__, "--rank-main", "--partition-dir", str(root), "--workers", str(workers), "--out", str(out)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # torch's huge pages, set before anything allocates
    launched = time.time()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=open(out / "job.log", "w"))
    watch = Watch(proc.pid)
    try:
        code = proc.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = "timeout"
    ended = time.time()
    peak = watch.close()
    seeds, times = _seed_check(out, trainers)
    first = [t["first_batch"] - launched for t in times.values()]
    cpu = [t["start_cpu"] for t in times.values()]
    imp = [t.get("import_cpu", float("nan")) for t in times.values()]
    sess = [t.get("open_cpu", float("nan")) - t.get("import_cpu", float("nan")) for t in times.values()]
    epoch = [t["epoch_end"] - t["first_batch"] for t in times.values()]
    leave = [t["left"] - t["epoch_end"] for t in times.values()]
    last_left = max((t["left"] for t in times.values()), default=ended)
    return {"trainers": trainers, "workers": workers, "procs": trainers * (1 + workers), "exit": code,
            "launch_to_batch_s": max(first, default=float("nan")),
            "start_cpu_s_per_proc": sum(cpu) / len(cpu) if cpu else float("nan"),
            "import_cpu_s_per_proc": sum(imp) / len(imp) if imp else float("nan"),
            "session_cpu_s_per_proc": sum(sess) / len(sess) if sess else float("nan"),
            "epoch_s": max(epoch, default=float("nan")), "shutdown_s": max(leave, default=float("nan")),
            "exit_s": ended - last_left, **peak, "seeds": seeds, "startup_steps_s": _steps(times)}


def _steps(times: Dict[int, Dict[str, float]]) -> Dict[str, float]:
    """dist_session's start-up steps (``DistEnv.startup_seconds``): the slowest rank's wall seconds in each."""
    steps: Dict[str, float] = {}
    for t in times.values():
        for k, v in t.items():
            if k.startswith("step_"):
                steps[k[5:]] = max(steps.get(k[5:], 0.0), v)
    return steps


def _steps_cell(r: dict) -> str:
    return " ".join(f"{k} {v:.1f}" for k, v in r["startup_steps_s"].items()) or "-"


def _split(r: dict) -> str:
    """``start cpu s/proc`` as imports / ``dist_session`` / loader and first batch."""
    imp, sess = r["import_cpu_s_per_proc"], r["session_cpu_s_per_proc"]
    return f"{imp:.2f} / {sess:.2f} / {r['start_cpu_s_per_proc'] - imp - sess:.2f}"


def _rows(text: str) -> List[Tuple[int, int]]:
    out = []
    for item in text.split(","):
        t, _, w = item.partition("x")
        out.append((int(t), int(w or 0)))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="8,16,32,64,16x3", help="jobs: TRAINERS or TRAINERSxWORKERS, comma-separated")
    p.add_argument("--num-nodes", type=int, default=40_000)
    p.add_argument("--timeout", type=float, default=1200, help="seconds per job")
    p.add_argument("--cache-dir", default="/tmp/pyg_dist_bench")
    p.add_argument("--json", default=None, help="also write the rows here")
    p.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--partition-dir", help=argparse.SUPPRESS)
    p.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank_main:
        return rank_main(args)
    head = ("trainers x workers", "procs", "exit", "launch->batch s", "start cpu s/proc", "import / session / batch",
            "session steps s (slowest rank)", "epoch s", "shutdown s",
            "exit s", "threads", "open files", "sockets", "RSS MB", "seeds")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    rows = []
    for trainers, workers in _rows(args.rows):
        r = run_row(trainers, workers, args)
        rows.append(r)
        print(f"| {trainers} x {workers} | {r['procs']} | {r['exit']} | {r['launch_to_batch_s']:.1f} | "
              f"{r['start_cpu_s_per_proc']:.2f} | {_split(r)} | {_steps_cell(r)} | {r['epoch_s']:.1f} | "
              f"{r['shutdown_s']:.1f} | "
              f"{r['exit_s']:.1f} | "
              f"{r['threads']} | "
              f"{r['files']} | {r['sockets']} | {r['rss_mb']} | {r['seeds']} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
