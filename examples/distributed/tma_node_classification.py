"""Node classification with time-based model aggregation (RandomTMA / SuperTMA), or synchronous DDP.

Partition with ``random`` (RandomTMA) or ``supernode`` (SuperTMA), one partition per trainer, then::

    pyg-dist-partition --dataset synthetic --method random --num-parts 2 --out /tmp/rnd-2
    torchrun --standalone --nproc-per-node 2 examples/distributed/tma_node_classification.py \\
        --partition-dir /tmp/rnd-2 --interval 1 --total-time 20

Each trainer samples only its own partition (owned nodes, internal edges: nothing remote, no RPC);
every ``--interval`` seconds the trainers average their weights; rank 0 scores every aggregated model
on the validation nodes of the whole graph while training goes on (one line per round), then the best
round's model on the test nodes. ``--mode ddp`` runs the synchronous baseline on the same folder and
time budget (distributed sampling, DDP gradient averaging every step, validation every ``--interval``
seconds at an epoch's end). The last two lines are ``stats={json}`` and ``test_acc=<float>``.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from common import GraphSAGE, check_args, parser, setup
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.format import read_meta
from pyg_dist.train.entry import run_main
from tma_common import Task, add_tma_flags, report, run_ddp_mode, run_tma_mode


def accuracy(model, full, split: str) -> float:
    model.eval()
    with torch.no_grad():
        pred = model(full.x, full.edge_index).argmax(-1)
    mask = full[f"{split}_mask"]
    return float((pred[mask] == full.y[mask]).float().mean())


def loss(model, batch):
    return F.cross_entropy(model(batch.x, batch.edge_index)[:batch.batch_size], batch.y[:batch.batch_size])


def task(args) -> Task:
    from pyg_dist import DistNeighborLoader
    from pyg_dist.loader import NeighborLoader

    def local_loader(data, rank):
        return NeighborLoader(data, args.num_neighbors, input_nodes=data.train_mask, batch_size=args.batch_size,
                              shuffle=True, seed=args.seed + rank)

    def dist_loader(env):
        return DistNeighborLoader(env, args.num_neighbors, input_nodes="train_mask", batch_size=args.batch_size,
                                  shuffle=True, seed=args.seed)

    return Task("tma_node_classification.py",
                lambda i, o: GraphSAGE(i, args.hidden, o, len(args.num_neighbors)), loss, local_loader,
                dist_loader, accuracy, classes=True)


def main(argv=None):
    p = add_tma_flags(parser(__doc__, max_steps=True))
    args = check_args(p, p.parse_args(argv))
    setup(args)
    meta = read_meta(args.partition_dir)
    if meta.is_hetero:
        raise InvalidArgumentError("tma_node_classification.py", "--partition-dir", args.partition_dir,
                                   "a homogeneous folder (this example has one node type)")
    run = run_tma_mode if args.mode == "tma" else run_ddp_mode
    out = run(task(args), args, meta)
    report(out, "acc")
    return out


if __name__ == "__main__":
    run_main(main, sys.argv[1:])
