"""Link prediction (MRR) with time-based model aggregation (RandomTMA / SuperTMA), or synchronous DDP.

First hold edges out and partition the rest (the generator's graph; ``--method random`` for RandomTMA,
``supernode`` for SuperTMA, ``metis`` for the DDP baseline)::

    python examples/distributed/tma_link_prediction.py --prepare --partition-dir /tmp/lp-rnd-2 \\
        --method random --num-parts 2 --num-nodes 20000
    torchrun --standalone --nproc-per-node 2 examples/distributed/tma_link_prediction.py \\
        --partition-dir /tmp/lp-rnd-2 --interval 1 --total-time 20

``--prepare`` removes 5 % + 5 % of the undirected edges (both directions) as validation and test
positives, partitions the remaining graph and writes the held-out pairs, in the folder's ids, to
``<partition-dir>.heldout.pt``. Training: GraphSAGE embeddings with a dot-product decoder, one
uniform negative per positive. Metric: MRR of each held-out positive against 100 random destinations,
on embeddings of the whole training graph. The last two lines are ``stats={json}`` and ``test_mrr=``.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch_geometric.sampler import NegativeSampling

from common import LinkModel, check_args, parser, setup
from pyg_dist.format import read_meta
from pyg_dist.train.entry import run_main
from tma_common import Task, add_tma_flags, report, run_ddp_mode, run_tma_mode

NEGATIVES = 100


def loss(model, batch):
    logits = model(batch.x, batch.edge_index, batch.edge_label_index)
    return F.binary_cross_entropy_with_logits(logits, batch.edge_label)


def mrr(model, full, pairs: torch.Tensor) -> float:
    """Mean reciprocal rank of each (src, dst) against ``NEGATIVES`` random destinations (fixed draw)."""
    model.eval()
    encoder = model.module.encoder if hasattr(model, "module") else model.encoder
    with torch.no_grad():
        z = encoder(full.x, full.edge_index)
    gen = torch.Generator().manual_seed(0)
    neg = torch.randint(0, full.num_nodes, (pairs.size(1), NEGATIVES), generator=gen)
    pos = (z[pairs[0]] * z[pairs[1]]).sum(-1, keepdim=True)
    scores = (z[pairs[0]].unsqueeze(1) * z[neg]).sum(-1)
    return float((1.0 / (1 + (scores > pos).sum(1).float())).mean())


def prepare(args) -> None:
    from torch_geometric.data import Data

    import pyg_dist
    from pyg_dist.format import load_original_ids
    from pyg_dist.partition import Partitioner
    data = pyg_dist.synthetic_graph(args.num_nodes, 10, seed=args.seed)
    n, (row, col) = data.num_nodes, data.edge_index
    pairs = data.edge_index[:, row < col]
    perm = torch.randperm(pairs.size(1), generator=torch.Generator().manual_seed(args.seed))
    k = pairs.size(1) // 20
    val, test = pairs[:, perm[:k]], pairs[:, perm[k:2 * k]]
    held = torch.cat([val, test], 1)
    gone = torch.cat([held[0] * n + held[1], held[1] * n + held[0]])
    keep = ~torch.isin(row * n + col, gone)
    train = Data(x=data.x, edge_index=data.edge_index[:, keep], num_nodes=n)
    Partitioner(train, args.num_parts, method=args.method).save(args.partition_dir, overwrite=True)
    inv = torch.empty(n, dtype=torch.long)
    inv[load_original_ids(args.partition_dir)["_N"]] = torch.arange(n)
    torch.save({"val": inv[val], "test": inv[test]}, f"{args.partition_dir}.heldout.pt")
    print(f"held out {k} + {k} edges; partitioned {int(keep.sum())} edges into {args.partition_dir}")


def task(args) -> Task:
    from pyg_dist import DistLinkNeighborLoader
    from pyg_dist.loader import LinkNeighborLoader
    held = torch.load(f"{args.partition_dir}.heldout.pt")
    neg = NegativeSampling("binary", 1)

    def local_loader(data, rank):
        return LinkNeighborLoader(data, args.num_neighbors, edge_label_index=data.edge_index, neg_sampling=neg,
                                  batch_size=args.batch_size, shuffle=True, seed=args.seed + rank)

    def dist_loader(env):
        return DistLinkNeighborLoader(env, args.num_neighbors, neg_sampling=neg, batch_size=args.batch_size,
                                      shuffle=True, seed=args.seed)

    return Task("tma_link_prediction.py", lambda i, o: LinkModel(i, o, len(args.num_neighbors)), loss,
                local_loader, dist_loader, lambda m, full, split: mrr(m, full, held[split]), classes=False)


def main(argv=None):
    p = add_tma_flags(parser(__doc__, max_steps=True, graph=True))  # graph: what --prepare generates
    p.set_defaults(method="random")
    p.add_argument("--prepare", action="store_true",
                   help="hold edges out of the generated graph and partition it (no training)")
    args = check_args(p, p.parse_args(argv))
    if args.prepare:
        return prepare(args)
    setup(args)
    run = run_tma_mode if args.mode == "tma" else run_ddp_mode
    out = run(task(args), args, read_meta(args.partition_dir))
    report(out, "mrr")
    return out


if __name__ == "__main__":
    run_main(main, sys.argv[1:])
