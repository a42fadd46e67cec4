"""Benchmark: what DataLoader workers cost and pay on the one-machine ``pyg_dist.NeighborLoader``.

Cora (``$PYG_DIST_DATA/planetoid``, else a generated graph of Cora's size), ``NeighborLoader([10, 10],
batch_size=128, shuffle=True)`` over every node (22 batches), ``num_workers`` 0 / 2 and
``persistent_workers`` False / True, and ``filter_per_worker`` at the loader's default and forced True
(PyG's default: features gathered in the workers). Each configuration runs in a fresh process (so
nothing is warm that a user's script would not have warm), ``--rounds`` times, interleaved. Per epoch
it times the loader alone and the loader feeding a GraphSAGE training step (2 x 64, Adam), and prints
one table: the median over rounds of the median epoch (epochs 2..N), the first epoch, and the ratio to
``num_workers=0``.

    python scripts/bench_workers.py [--epochs 8] [--rounds 3] [--threads 1]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

#: (num_workers, persistent_workers, filter_per_worker): None = the loader's default.
CONFIGS = [(0, False, None), (2, False, None), (2, True, None), (2, False, True), (2, True, True)]


def load_graph():
    import pyg_dist
    from pyg_dist.datasets import shared_data_root
    root = shared_data_root() / "planetoid"
    if (root / "Cora" / "raw").is_dir():
        return "cora", pyg_dist.load_planetoid("cora", root)
    return "synthetic (Cora-sized)", pyg_dist.synthetic_graph(2708, 3.9, num_features=1433, num_classes=7)


def run_config(workers: int, persistent: bool, filter_per_worker, epochs: int, threads: int) -> dict:
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GraphSAGE

    import pyg_dist
    torch.set_num_threads(threads)
    name, data = load_graph()
    loader = pyg_dist.NeighborLoader(data, [10, 10], batch_size=128, shuffle=True, num_workers=workers,
                                     persistent_workers=persistent, filter_per_worker=filter_per_worker, seed=0)
    torch.manual_seed(0)
    model = GraphSAGE(data.num_features, 64, 2, int(data.y.max()) + 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    only, train = [], []
    for _ in range(epochs):
        t0 = time.perf_counter()
        for _batch in loader:
            pass
        only.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for batch in loader:
            opt.zero_grad()
            loss = F.cross_entropy(model(batch.x, batch.edge_index)[:batch.batch_size], batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
        train.append(time.perf_counter() - t0)
    return {"graph": name, "batches": len(loader), "only": only, "train": train}


def _child(args, config) -> dict:
    out = subprocess.run([sys.executable, __file__, "--epochs", str(args.epochs), "--threads", str(args.threads),
                          "--child", json.dumps(config)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3, help="runs of every configuration, interleaved")
    p.add_argument("--threads", type=int, default=1, help="torch threads of the training process")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        workers, persistent, fpw = json.loads(args.child)
        print(json.dumps(run_config(workers, persistent, fpw, args.epochs, args.threads)))
        return
    runs: dict = {c: [] for c in CONFIGS}
    for _ in range(args.rounds):
        for config in CONFIGS:
            runs[config].append(_child(args, list(config)))
    first = runs[CONFIGS[0]][0]
    print(f"NeighborLoader([10, 10], batch_size=128) on {first['graph']}, {first['batches']} batches per epoch, "
          f"{args.epochs} epochs x {args.rounds} rounds, torch threads {args.threads}; ms, median over rounds of "
          f"the median epoch (2..{args.epochs})")
    print("| num_workers | persistent_workers | filter_per_worker | loader epoch | vs 0 workers | train epoch | "
          "vs 0 workers | first train epoch |")
    print("|---|---|---|---|---|---|---|---|")

    def med(rs, k, first_only=False):
        return statistics.median(r[k][0] if first_only else statistics.median(r[k][1:]) for r in rs)
    base = {k: med(runs[CONFIGS[0]], k) for k in ("only", "train")}
    for (workers, persistent, fpw), rs in runs.items():
        only, train = med(rs, "only"), med(rs, "train")
        print(f"| {workers} | {persistent} | {'default' if fpw is None else fpw} | {only * 1e3:.0f} | "
              f"{only / base['only']:.2f}x | {train * 1e3:.0f} | {train / base['train']:.2f}x | "
              f"{med(rs, 'train', True) * 1e3:.0f} |")


if __name__ == "__main__":
    main()
