"""Benchmark: learnable partitioned embeddings (``pyg_dist.embedding``): accuracy and update throughput.

Part 1 (``--cora``, needs ``$PYG_DIST_DATA/planetoid``): Cora without features, 64-dim learnable rows +
GraphSAGE, ``examples/distributed/embedding_node_classification.py``: the one-process baseline
(``nn.Embedding(sparse=True)`` + ``torch.optim.SparseAdam``) against 2 ranks (Hogwild-style and
``--sync``), ``--seeds`` runs each, mean test accuracy.

Part 2: update throughput on the reference graph's 2-way METIS folder (``--folder``, by default the one
``bench_dist.py`` caches): a ``--dim``-wide table over every node, 2 ranks, ``DistNeighborLoader`` batches
([15, 10, 5], 1024 seeds, two in flight); per step the rows of ``batch.n_id`` are read, a loss on them
backpropagated and ``SparseAdam.step()`` run (remote pushes awaited at the next step, so they overlap
the next batch). Reports embedding rows updated per second over both ranks and the time split.

    python scripts/bench_embedding.py [--seeds 3] [--steps 20] [--dim 128] [--skip-cora]
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "distributed" / "embedding_node_classification.py"


def _acc(cmd, env) -> float:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines or not re.fullmatch(r"test_acc=[0-9.]+", lines[-1]):
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return float(lines[-1].split("=")[1])


def cora_rows(args) -> list:
    from pyg_dist.datasets import shared_data_root
    from pyg_dist.partition import Partitioner
    from pyg_dist.testing import free_port
    root = shared_data_root() / "planetoid"
    if not (root / "Cora" / "raw").is_dir():
        return ["| Cora | (skipped: no $PYG_DIST_DATA/planetoid/Cora) | | |"]
    import pyg_dist
    folder = Path(tempfile.gettempdir()) / "pyg_dist_bench_emb_cora2"
    if not (folder / "META.json").is_file():
        Partitioner(pyg_dist.load_planetoid("cora", root), 2).save(folder, overwrite=True, progress=False)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    base = ["--partition-dir", str(folder), "--epochs", str(args.epochs), "--quiet"]
    rows = []
    for label, extra, dist in (("1 process, nn.Embedding + torch SparseAdam", ["--single"], False),
                               ("2 ranks, DistEmbedding + SparseAdam (Hogwild)", [], True),
                               ("2 ranks, DistEmbedding + SparseAdam (sync)", ["--sync"], True)):
        accs = []
        for seed in range(args.seeds):
            cmd = [sys.executable, str(EXAMPLE), *base, "--seed", str(seed), *extra]
            if dist:
                cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master-addr=127.0.0.1",
                       f"--master-port={free_port()}", *cmd[1:]]
                env["PYG_DIST_RPC_PORT"] = str(free_port())
            accs.append(_acc(cmd, env))
        rows.append(f"| Cora, no features, {args.emb_dim}-dim | {label} | {statistics.mean(accs):.4f} | "
                    f"{' '.join(f'{a:.3f}' for a in accs)} |")
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def throughput_rank(rank: int, world: int, root: str, opts: dict) -> dict:
    """One rank: ``opts['steps']`` embedding steps on real sampled batches; times and counts."""
    torch.set_num_threads(1)
    from pyg_dist import DistNeighborLoader, TrainConfig, dist_session
    from pyg_dist.embedding import DistEmbedding, SparseAdam
    with dist_session(TrainConfig(root, timeout=600, call_timeout=300)) as env:
        loader = DistNeighborLoader(env, [15, 10, 5], batch_size=1024, shuffle=True, seed=0, node_attrs=["y"],
                                    concurrency=2)
        t = time.perf_counter()
        emb = DistEmbedding(env, opts["dim"], name="bench")
        opt = SparseAdam([emb], lr=0.01)
        init = time.perf_counter() - t
        rows = read = step = 0.0
        it = iter(loader)
        for i in range(opts["steps"] + opts["warmup"]):
            if i == opts["warmup"]:
                rows, read, step, start = 0.0, 0.0, 0.0, time.perf_counter()
            batch = next(it)
            t0 = time.perf_counter()
            x = emb(batch.n_id)
            x.sum().mul(1e-6).backward()  # any loss: the gradient rows are what is measured
            t1 = time.perf_counter()
            opt.step()
            opt.zero_grad()
            t2 = time.perf_counter()
            rows += batch.n_id.unique().numel()
            read, step = read + t1 - t0, step + t2 - t1
        opt.flush()
        wall = time.perf_counter() - start
        table_mb = sum(r.numel() * r.element_size() for r in emb.tables.values()) / 2 ** 20
        return dict(rows=rows, wall=wall, read=read, step=step, init=init, table_mb=table_mb)


def throughput_row(args) -> str:
    from pyg_dist.testing import spawn_world
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_embedding  # spawned ranks import the function by module name
    opts = {"dim": args.dim, "steps": args.steps, "warmup": 3}
    env = {"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    res = spawn_world(2, bench_embedding.throughput_rank, args.folder, opts, timeout=3600, env=env)
    wall = max(r["wall"] for r in res)
    total = sum(r["rows"] for r in res)
    per = [f"{r['read'] / args.steps * 1000:.0f}/{r['step'] / args.steps * 1000:.0f}" for r in res]
    return (f"| reference graph, {args.dim}-dim, 2 ranks | rows updated/s (both ranks) | {total / wall / 1e6:.2f} M | "
            f"{total / (2 * args.steps) / 1e3:.0f}k unique rows/step/rank; read+backward / step ms per rank "
            f"{', '.join(per)}; table {res[0]['table_mb']:.0f} MB/rank, init {max(r['init'] for r in res):.1f} s |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--emb-dim", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--folder", default="/tmp/pyg_dist_bench/dist_products_like_metis2")
    p.add_argument("--skip-cora", action="store_true")
    p.add_argument("--skip-throughput", action="store_true")
    args = p.parse_args()
    rows = [] if args.skip_cora else cora_rows(args)
    if not args.skip_throughput:
        rows.append(throughput_row(args))
    print("| setting | what | result | detail |")
    print("|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
