"""Benchmark: time-based model aggregation (RandomTMA / SuperTMA) against synchronous DDP, same time budget.

For each graph and trainer count it runs, each in a fresh ``torchrun`` job on 127.0.0.1:

* ``ddp``: synchronous DDP with distributed sampling (``DistNeighborLoader`` over METIS partitions,
  gradients averaged every step);
* ``RandomTMA``: local-only trainers on random partitions, weights averaged every ``--interval`` s;
* ``SuperTMA``: the same on super-node partitions.

Graphs: Cora (``$PYG_DIST_DATA/planetoid``, skipped when absent) and the generator's graph
(``--num-nodes``), node classification with 2 and 4 trainers; link prediction (MRR, 5 % + 5 % of the
edges held out) on the generator's graph with 2 trainers. Every run trains for ``--seconds`` and reports
the best-validation model's test metric (rank 0 scores aggregated models on the whole graph). Every row
uses the same model and Adam (lr 0.01, ``--weight-decay`` 5e-4 by default). Prints one table: test metric
(mean ± standard deviation over ``--repeats``), synchronisations, MB sent per trainer, steps per trainer, total steps/s.

    python scripts/bench_tma.py [--seconds 15] [--interval 1] [--repeats 1] [--num-nodes 20000]
                                [--only cora,generator,link] [--weight-decay 5e-4] [--average-optimizer also]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "distributed"
MODES = [("ddp", "metis", "DDP (sync)"), ("tma", "random", "RandomTMA"), ("tma", "supernode", "SuperTMA")]


def free_port() -> int:
    from pyg_dist.testing import free_port as fp
    return fp()


def partition(name: str, data, method: str, parts: int, out: Path) -> str:
    from pyg_dist.partition import Partitioner
    root = out / f"{name}-{method}-{parts}"
    if not (root / "META.json").is_file():
        Partitioner(data, parts, method=method).save(root, overwrite=True, progress=False)
    return str(root)


def run(script: str, world: int, folder: str, mode: str, args, extra=()) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={world}",
           "--master-addr=127.0.0.1", f"--master-port={free_port()}", str(EXAMPLES / script),
           "--partition-dir", folder, "--mode", mode, "--total-time", str(args.seconds),
           "--interval", str(args.interval), "--weight-decay", str(args.weight_decay), "--quiet", *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYG_DIST_RPC_PORT=str(free_port()))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.seconds * 4 + 240)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("stats=")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{script} {mode} on {folder} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][len("stats="):])


def row(graph: str, task: str, world: int, label: str, stats: list) -> str:
    test = statistics.mean(s["test"] for s in stats)
    sd = f" ± {statistics.stdev(s['test'] for s in stats):.4f}" if len(stats) > 1 else ""
    syncs = statistics.mean(s["syncs"] for s in stats)
    mb = statistics.mean(s["bytes_per_trainer"] for s in stats) / 2 ** 20
    steps = [statistics.mean(s["steps"][r] for s in stats) for r in range(world)]
    rate = statistics.mean(sum(s["steps"]) / s["seconds"] for s in stats)
    spread = (max(steps) - min(steps)) / max(max(steps), 1) * 100
    return (f"| {graph} | {task} | {world} | {label} | {test:.4f}{sd} | {syncs:.0f} | {mb:.1f} | "
            f"{'/'.join(f'{x:.0f}' for x in steps)} ({spread:.0f} %) | {rate:.1f} |")


def node_jobs(args, out: Path):
    import pyg_dist
    from pyg_dist.datasets import shared_data_root
    graphs = []
    cora = shared_data_root() / "planetoid"
    if "cora" in args.only and (cora / "Cora" / "raw").is_dir():
        graphs.append(("Cora", pyg_dist.load_planetoid("cora", cora), 32))
    if "generator" in args.only:
        graphs.append((f"generator {args.num_nodes // 1000}k", pyg_dist.synthetic_graph(args.num_nodes, 10, seed=0),
                       256))
    for name, data, batch in graphs:
        for world in args.worlds:
            for mode, method, label, more in modes(args):
                folder = partition(name.split()[0].lower(), data, method, world, out)
                yield (name, "node acc", world, label, "tma_node_classification.py", folder, mode,
                       ("--batch-size", str(batch), *more))


def modes(args):
    """``(mode, partition method, label, extra args)``: MODES, plus the TMA rows with averaged optimizer
    moments when ``--average-optimizer``."""
    for mode, method, label in MODES:
        if mode != "tma" or args.average_optimizer != "only":
            yield mode, method, label, ()
        if mode == "tma" and args.average_optimizer in ("also", "only"):
            yield mode, method, f"{label} + avg. moments", ("--average-optimizer",)


def link_jobs(args, out: Path):
    if "link" not in args.only:
        return
    for mode, method, label, more in modes(args):
        folder = str(out / f"lp-{method}-2")
        if not Path(folder, "META.json").is_file():
            subprocess.run([sys.executable, str(EXAMPLES / "tma_link_prediction.py"), "--prepare", "--partition-dir",
                            folder, "--method", method, "--num-parts", "2", "--num-nodes", str(args.num_nodes)],
                           check=True, capture_output=True)
        yield (f"generator {args.num_nodes // 1000}k", "link MRR", 2, label, "tma_link_prediction.py", folder, mode,
               ("--batch-size", "512", *more))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--num-nodes", type=int, default=20000)
    p.add_argument("--only", default="cora,generator,link", help="which of cora, generator, link to run")
    p.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "pyg_dist_bench_tma"))
    p.add_argument("--weight-decay", type=float, default=5e-4,
                   help="Adam's weight decay in every row (5e-4: PyG's Planetoid setting; 0: none)")
    p.add_argument("--worlds", default="2,4", help="trainer counts of the node classification rows")
    p.add_argument("--average-optimizer", choices=("no", "also", "only"), default="no",
                   help="TMA rows with Adam's moments averaged at every round too (also: beside the plain ones)")
    args = p.parse_args()
    args.worlds = [int(w) for w in args.worlds.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for job in list(node_jobs(args, out)) + list(link_jobs(args, out)):
        graph, task, world, label, script, folder, mode, extra = job
        stats = [run(script, world, folder, mode, args, extra) for _ in range(args.repeats)]
        rows.append(row(graph, task, world, label, stats))
        print(rows[-1], file=sys.stderr, flush=True)
    print(f"time budget {args.seconds:.0f} s per run, aggregation / validation every {args.interval:g} s, "
          f"Adam lr 0.01 weight decay {args.weight_decay:g}, {args.repeats} run(s) each, OMP_NUM_THREADS=1, "
          f"{os.cpu_count()} cores")
    print("| graph | task | trainers | training | test metric | syncs | MB sent / trainer | steps per trainer "
          "(spread) | steps/s total |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
