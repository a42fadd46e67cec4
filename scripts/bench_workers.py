"""Benchmark: what DataLoader workers cost and pay on the one-machine ``pyg_dist.NeighborLoader``.

Cora (``$PYG_DIST_DATA/planetoid``, else a generated graph of Cora's size), ``NeighborLoader([10, 10],
batch_size=128, shuffle=True)`` over every node (22 batches), ``num_workers`` 0 / 2 and
``persistent_workers`` False / True, each configuration in a fresh process (so nothing is warm that a
user's script would not have warm). Per epoch it times the loader alone and the loader feeding a
GraphSAGE training step (2 x 64, Adam), and prints one table: the median epoch (epochs 2..N), the
first epoch, and the ratio to ``num_workers=0``.

    python scripts/bench_workers.py [--epochs 8] [--threads 1]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

CONFIGS = [(0, False), (2, False), (2, True)]


def load_graph():
    import pyg_dist
    from pyg_dist.datasets import shared_data_root
    root = shared_data_root() / "planetoid"
    if (root / "Cora" / "raw").is_dir():
        return "cora", pyg_dist.load_planetoid("cora", root)
    return "synthetic (Cora-sized)", pyg_dist.synthetic_graph(2708, 3.9, num_features=1433, num_classes=7)


def run_config(workers: int, persistent: bool, epochs: int, threads: int) -> dict:
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GraphSAGE

    import pyg_dist
    torch.set_num_threads(threads)
    name, data = load_graph()
    loader = pyg_dist.NeighborLoader(data, [10, 10], batch_size=128, shuffle=True, num_workers=workers,
                                     persistent_workers=persistent, seed=0)
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--threads", type=int, default=1, help="torch threads of the training process")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        workers, persistent = json.loads(args.child)
        print(json.dumps(run_config(workers, persistent, args.epochs, args.threads)))
        return
    rows = {}
    for workers, persistent in CONFIGS:
        out = subprocess.run([sys.executable, __file__, "--epochs", str(args.epochs), "--threads", str(args.threads),
                              "--child", json.dumps([workers, persistent])], capture_output=True, text=True,
                             check=True)
        rows[(workers, persistent)] = json.loads(out.stdout.strip().splitlines()[-1])
    first = rows[CONFIGS[0]]
    print(f"NeighborLoader([10, 10], batch_size=128) on {first['graph']}, {first['batches']} batches per epoch, "
          f"{args.epochs} epochs, torch threads {args.threads}; times in ms (median of epochs 2..{args.epochs})")
    print("| num_workers | persistent_workers | loader epoch | vs 0 workers | first epoch | train epoch | "
          "vs 0 workers | first train epoch |")
    print("|---|---|---|---|---|---|---|---|")
    base = {k: statistics.median(first[k][1:]) for k in ("only", "train")}
    for (workers, persistent), r in rows.items():
        med = {k: statistics.median(r[k][1:]) for k in ("only", "train")}
        print(f"| {workers} | {persistent} | {med['only'] * 1e3:.0f} | {med['only'] / base['only']:.2f}x | "
              f"{r['only'][0] * 1e3:.0f} | {med['train'] * 1e3:.0f} | {med['train'] / base['train']:.2f}x | "
              f"{r['train'][0] * 1e3:.0f} |")


if __name__ == "__main__":
    main()
