"""Demo: partition a graph into 2 and train GraphSAGE with 2 ranks on this machine (offline).

    python examples/distributed/demo.py                            # built-in generator, 20k nodes
    python examples/distributed/demo.py --dataset cora --root "$PYG_DIST_DATA/planetoid"

It partitions the graph into a temporary folder (METIS), then launches
``python -m torch.distributed.run --standalone --nproc-per-node 2 node_classification.py
--partition-dir DIR ...`` and streams its output: per-epoch loss and accuracy, then ``test_acc=``.
The same training script runs across machines with ``torchrun --nnodes N --node-rank R
--master-addr HOST`` on a folder every machine can read.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from common import check_args, parser

HERE = Path(__file__).resolve().parent
#: The generator's settings: 8 learnable classes from noisy features plus community structure.
SYNTHETIC = dict(avg_degree=10.0, num_features=32, num_classes=8, community_size=200, intra_frac=0.85,
                 noise=6.0)


def parse_args(argv=None) -> argparse.Namespace:
    # the graph to generate and partition; the training flags go on to node_classification.py
    p = parser(__doc__, folder=False, graph=True, epochs=True, workers=True)
    p.add_argument("--dataset", choices=["synthetic", "cora", "citeseer"], default="synthetic")
    p.add_argument("--root", default=None, help="folder with the Planetoid raw files (cora / citeseer)")
    p.add_argument("--keep", default=None, help="write the partition folder here and keep it")
    return check_args(p, p.parse_args(argv))


def partition(args: argparse.Namespace, out: str) -> None:
    import pyg_dist
    from pyg_dist.partition import Partitioner

    if args.dataset == "synthetic":
        data = pyg_dist.synthetic_graph(args.num_nodes, seed=args.seed, **SYNTHETIC)
    else:
        data = pyg_dist.load_planetoid(args.dataset, args.root)
    print(f"dataset={args.dataset} nodes={data.num_nodes} edges={data.num_edges} -> {args.num_parts} "
          f"partitions ({args.method}) in {out}", flush=True)
    stats = Partitioner(data, args.num_parts, method=args.method, seed=args.seed).save(out, overwrite=True,
                                                                                       progress=False)
    cut = stats.get("edge_cut") if isinstance(stats, dict) else None
    if cut is not None:
        print(f"edge_cut={cut:.3f}", flush=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    own = args.keep is None
    out = tempfile.mkdtemp(prefix="pyg_dist_demo_") if own else args.keep
    try:
        partition(args, out)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={args.num_parts}", str(HERE / "node_classification.py"),
               "--partition-dir", out, "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
               "--num-neighbors", ",".join(map(str, args.num_neighbors)), "--num-workers", str(args.num_workers),
               "--seed", str(args.seed)]
        env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        env.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # torch's huge pages, set before anything allocates
        print(" ".join(cmd[2:]), flush=True)
        return subprocess.call(cmd, env=env)
    finally:
        if own:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
