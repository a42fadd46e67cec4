"""Distributed GraphSAGE link prediction on a partitioned (homogeneous) graph (launch with torchrun).

    torchrun --standalone --nproc-per-node 2 examples/distributed/link_prediction.py \\
        --partition-dir /tmp/demo-2 --epochs 3

Seed edges are the edges each partition owns (co-located with their destination), one random
negative per positive (binary), a dot-product decoder over GraphSAGE embeddings. Every 20th edge (by global
edge id) is held out of the supervision edges; after training, rank 0 prints the MRR of each held-out edge
against ``--eval-negatives`` random corruptions of its destination, scored side by side from sampled
neighbourhoods and from whole-graph embeddings of layer-wise inference (``held_out=... mrr_sampled=...
eval_sampled_s=... mrr_layerwise=... eval_layerwise_s=...``; see ``link_eval.py``), then, last,
``test_acc=<float>``: accuracy of telling the partition's edges from fresh random negatives (transductive).
``temporal_link_prediction.py`` runs the same loop with ``time_attr="edge_time"`` (every edge supervises; no
held-out MRR, since layer-wise inference does not respect time).
"""
from __future__ import annotations

import sys
import time

import torch
import torch.nn.functional as F
from torch_geometric.sampler import NegativeSampling

from common import LinkModel, check_args, checkpoint_config, parser, print0, resume, set_loss, setup, steps
from link_eval import evaluate, split
from pyg_dist import DistLinkNeighborLoader, InvalidArgumentError, TrainConfig, dist_session, wrap_ddp
from pyg_dist.format import read_meta
from pyg_dist.train.entry import run_main
from pyg_dist.train.session import all_sum


def parse_args(argv=None, doc: str = __doc__):
    p = parser(doc, epochs=True, workers=True, concurrency=True, max_steps=True, checkpoints=True)
    p.add_argument("--eval-negatives", type=int, default=20,
                   help="random negatives per held-out edge in the MRR evaluation (not temporal)")
    return check_args(p, p.parse_args(argv))


def check_folder(script: str, partition_dir: str, temporal: bool):
    """The folder suits this script (read from META.json before any process group or RPC starts)."""
    meta = read_meta(partition_dir)
    if meta.is_hetero:
        raise InvalidArgumentError(script, "--partition-dir", partition_dir,
                                   "a homogeneous folder (this example has one node and one edge type)")
    if temporal and not meta.edge_time_types:
        raise InvalidArgumentError(script, "--partition-dir", partition_dir,
                                   "a folder with edge_time (partition with --edge-time)")
    return meta


def run_epoch(model, loader, env, optimizer=None, max_steps=0, desc="", quiet=True, ckpt=None):
    """One pass; trains when ``optimizer`` is given (``ckpt``: its checkpointer). Returns (mean loss,
    accuracy) over all ranks."""
    model.train(optimizer is not None)
    loss_sum = correct = total = 0.0
    bar, batches = steps(loader, max_steps, desc, quiet, start=ckpt.start_batch if ckpt else 0)
    for batch in batches:
        batch = batch.to(env.device)
        with torch.set_grad_enabled(optimizer is not None):
            logits = model(batch.x, batch.edge_index, batch.edge_label_index)
            loss = F.binary_cross_entropy_with_logits(logits, batch.edge_label)
        if optimizer is not None:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if ckpt is not None:
                ckpt.step()  # a checkpoint when one is due (--checkpoint-dir)
        loss_sum += loss.item() * logits.numel()
        correct += int(((logits > 0).float() == batch.edge_label).sum())
        total += logits.numel()
        set_loss(bar, loss_sum / max(total, 1))
    loss_sum, correct, total = all_sum([loss_sum, correct, total], env).tolist()
    return loss_sum / max(total, 1), correct / max(total, 1)


def main(argv=None, temporal: bool = False, doc: str = __doc__) -> float:
    args = parse_args(argv, doc)
    script = "temporal_link_prediction.py" if temporal else "link_prediction.py"
    check_folder(script, args.partition_dir, temporal)
    setup(args)
    torch.manual_seed(args.seed)
    config = TrainConfig(args.partition_dir, num_workers=args.num_workers, **checkpoint_config(args))
    with dist_session(config) as env:
        meta = env.graph_store.partition_meta
        time_attr = "edge_time" if temporal else None

        train_edges, held_out = (None, None) if temporal else split(env)

        def loader(train: bool, seed: int):
            return DistLinkNeighborLoader(env, args.num_neighbors, edge_label_index=train_edges if train else None,
                                          batch_size=args.batch_size, shuffle=train,
                                          neg_sampling=NegativeSampling("binary", 1), time_attr=time_attr,
                                          num_workers=args.num_workers, shuffle_seed=seed, seed=seed,
                                          concurrency=args.concurrency,
                                          seed_split="balanced" if train else "partition")

        train_loader = loader(True, args.seed)
        in_dim = env.feature_store.get_tensor(group_name=None, attr_name="x").size(-1)
        model = wrap_ddp(LinkModel(in_dim, args.hidden, len(args.num_neighbors)), env)
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
        print0(env, f"world={env.world_size} partitions={meta.num_parts} temporal={temporal} "
                    f"batches_per_epoch={train_loader.num_batches}")
        ckpt = env.checkpointer(model=model, optimizer=optimizer, loaders={"train": train_loader})
        try:
            resume(env, ckpt)
            for epoch in ckpt.epochs(args.epochs, train_loader):  # from the resumed epoch on, if any
                start = time.perf_counter()
                loss, acc = run_epoch(model, train_loader, env, optimizer, args.max_steps, f"epoch {epoch}",
                                      args.quiet, ckpt)
                print0(env, f"epoch={epoch:03d} loss={loss:.4f} link_acc={acc:.4f} "
                            f"time={time.perf_counter() - start:.2f}s")
        finally:
            train_loader.shutdown()
        if not temporal:        # layer-wise inference needs the trainers in the RPC world (no sampler workers)
            print0(env, evaluate(model, env, held_out, args, layerwise=args.num_workers == 0))
        torch.manual_seed(args.seed + 1000)
        test_loader = loader(False, args.seed + 1)
        try:
            _, test_acc = run_epoch(model, test_loader, env, None, args.max_steps)
        finally:
            test_loader.shutdown()
        print0(env, f"test_acc={test_acc:.4f}")
        return test_acc


if __name__ == "__main__":
    run_main(main, sys.argv[1:])
