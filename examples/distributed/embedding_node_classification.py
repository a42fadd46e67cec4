"""Node classification on a featureless graph: learnable, partitioned node embeddings + GraphSAGE.

The folder's ``x`` is ignored: every node gets a learnable ``--dim``-wide row, stored with the partition
that owns it (:class:`pyg_dist.embedding.DistEmbedding`) and updated sparsely where it lives
(``SparseAdam``); the GraphSAGE layers are dense and averaged by DDP::

    pyg-dist-partition --dataset cora --num-parts 2 --out /tmp/cora-2
    torchrun --standalone --nproc-per-node 2 examples/distributed/embedding_node_classification.py \\
        --partition-dir /tmp/cora-2 --epochs 30

``--single`` runs the one-process baseline on the same folder (``nn.Embedding(sparse=True)`` +
``torch.optim.SparseAdam``, the one-machine ``NeighborLoader`` over the whole graph): no torchrun.
``--sync`` makes every embedding step exact (barrier per step) instead of Hogwild-style. Rank 0 prints
per-epoch loss and validation accuracy and, last, ``test_acc=<float>``.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from common import GraphSAGE, check_args, checkpoint_config, parser, resume, setup
from pyg_dist.train.entry import run_main


def parse_args(argv=None):
    p = parser(__doc__, epochs=True, checkpoints=True)  # checkpoints hold the embedding rows and their state too
    p.set_defaults(epochs=30, batch_size=64)
    p.add_argument("--dim", type=int, default=64, help="width of every node's learnable row")
    p.add_argument("--emb-lr", type=float, default=0.05, help="embedding rows (SparseAdam)")
    p.add_argument("--sync", action="store_true", help="exact embedding steps (barrier per step)")
    p.add_argument("--single", action="store_true", help="the one-process nn.Embedding baseline")
    args = check_args(p, p.parse_args(argv))
    if args.single and args.checkpoint_dir:
        p.error("--checkpoint-dir is for the distributed run (not --single)")
    return args


def run_epoch(model, embed, loader, opts=(), ckpt=None):
    """One pass (training when ``opts`` are given; ``ckpt``: their checkpointer); returns (loss sum,
    correct, count)."""
    loss_sum = correct = total = 0.0
    model.train(bool(opts))
    for batch in loader:
        with torch.set_grad_enabled(bool(opts)):
            out = model(embed(batch.n_id), batch.edge_index)[:batch.batch_size]
            y = batch.y[:batch.batch_size]
            loss = F.cross_entropy(out, y)
        if opts:
            loss.backward()
            for opt in opts:
                opt.step()
                opt.zero_grad()
            if ckpt is not None:
                ckpt.step()
        loss_sum += loss.item() * y.numel()
        correct += int((out.argmax(-1) == y).sum())
        total += y.numel()
    return loss_sum, correct, total


def distributed(args) -> float:
    from pyg_dist import DistNeighborLoader, TrainConfig, dist_session, wrap_ddp
    from pyg_dist.embedding import DistEmbedding, SparseAdam
    from pyg_dist.train.session import all_sum
    with dist_session(TrainConfig(args.partition_dir, **checkpoint_config(args))) as env:
        def loader(mask, train):
            return DistNeighborLoader(env, args.num_neighbors, input_nodes=mask, batch_size=args.batch_size,
                                      shuffle=train, seed=args.seed, node_attrs=["y"],
                                      seed_split="balanced" if train else "partition")
        train, val, test = loader("train_mask", True), loader("val_mask", False), loader("test_mask", False)
        torch.manual_seed(args.seed)
        embed = DistEmbedding(env, args.dim, name="nodes")
        model = wrap_ddp(GraphSAGE(args.dim, args.hidden, env.num_classes(), len(args.num_neighbors)), env)
        opts = (torch.optim.Adam(model.parameters(), lr=args.lr),
                SparseAdam([embed], lr=args.emb_lr, sync=args.sync))
        ckpt = env.checkpointer(model=model, optimizer=opts[0], loaders={"train": train, "val": val},
                                extra={"embedding": embed, "embedding_optimizer": opts[1]})
        resume(env, ckpt)
        for epoch in ckpt.epochs(args.epochs, train):
            loss, _, n = all_sum(run_epoch(model, embed, train, opts, ckpt), env).tolist()
            _, correct, total = all_sum(run_epoch(model, embed, val), env).tolist()
            if env.rank == 0 and not args.quiet:
                print(f"epoch={epoch:03d} loss={loss / max(n, 1):.4f} val_acc={correct / max(total, 1):.4f}",
                      flush=True)
        opts[1].flush()
        _, correct, total = all_sum(run_epoch(model, embed, test), env).tolist()
        acc = correct / max(total, 1)
        if env.rank == 0:
            print(f"test_acc={acc:.4f}", flush=True)
        return acc


def single(args) -> float:
    from pyg_dist.loader import NeighborLoader
    from pyg_dist.tma import whole_graph
    data = whole_graph(args.partition_dir)
    torch.manual_seed(args.seed)
    embed = torch.nn.Embedding(data.num_nodes, args.dim, sparse=True)
    model = GraphSAGE(args.dim, args.hidden, int(data.y.max()) + 1, len(args.num_neighbors))
    opts = (torch.optim.Adam(model.parameters(), lr=args.lr),
            torch.optim.SparseAdam(list(embed.parameters()), lr=args.emb_lr))

    def loader(mask, train):
        return NeighborLoader(data, args.num_neighbors, input_nodes=data[mask], batch_size=args.batch_size,
                              shuffle=train, seed=args.seed)
    train, val, test = loader("train_mask", True), loader("val_mask", False), loader("test_mask", False)
    for epoch in range(1, args.epochs + 1):
        loss, _, n = run_epoch(model, embed, train, opts)
        _, correct, total = run_epoch(model, embed, val)
        if not args.quiet:
            print(f"epoch={epoch:03d} loss={loss / max(n, 1):.4f} val_acc={correct / max(total, 1):.4f}", flush=True)
    _, correct, total = run_epoch(model, embed, test)
    print(f"test_acc={correct / max(total, 1):.4f}", flush=True)
    return correct / max(total, 1)


def main(argv=None):
    args = parse_args(argv)
    setup(args)
    return single(args) if args.single else distributed(args)


if __name__ == "__main__":
    run_main(main, sys.argv[1:])
