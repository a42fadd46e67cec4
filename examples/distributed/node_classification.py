"""Distributed GraphSAGE node classification on a partitioned graph (launch with torchrun).

Partition once, then start one process per partition (or several) on each machine::

    pyg-dist-partition --dataset synthetic --num-parts 2 --out /tmp/demo-2
    torchrun --standalone --nproc-per-node 2 examples/distributed/node_classification.py \\
        --partition-dir /tmp/demo-2 --epochs 5
    # two machines: torchrun --nnodes 2 --nproc-per-node 1 --node-rank R --master-addr HOST ...

Every rank trains on the seeds its partition owns (equal batch counts, agreed before the first
epoch), gradients are averaged by DDP. Rank 0 prints per-epoch loss and accuracy and, last,
``test_acc=<float>``. A heterogeneous folder is detected from META.json (``--target`` picks the
labelled node type, default: the first type with ``y``).
"""
from __future__ import annotations

import sys
import time

import torch
import torch.nn.functional as F

from common import (
    GraphSAGE,
    TrimmedGraphSAGE,
    check_args,
    checkpoint_config,
    parser,
    print0,
    resume,
    set_loss,
    setup,
    steps,
)
from pyg_dist import DistNeighborLoader, InvalidArgumentError, TrainConfig, dist_session, wrap_ddp
from pyg_dist.train.entry import run_main
from pyg_dist.train.session import all_sum
from pyg_dist.train.stages import EpochClock, process_age


def parse_args(argv=None):
    p = parser(__doc__, epochs=True, workers=True, concurrency=True, max_steps=True, checkpoints=True)
    p.add_argument("--target", default=None, help="labelled node type of a heterogeneous folder")
    p.add_argument("--cache-ratio", type=float, default=None,
                   help="fill a remote-feature cache at start-up, this fraction of the partition's own feature "
                        "bytes (default: the folder's, if pyg-dist-partition --cache-ratio wrote one)")
    p.add_argument("--cache-policy", choices=["degree", "presample"], default="degree")
    p.add_argument("--remote-rows", choices=["exact", "int8"], default="exact",
                   help="how feature rows of other partitions travel: exact, or int8 codes plus a scale and offset "
                        "per row (~4x fewer bytes; TrainConfig.remote_rows)")
    p.add_argument("--save-model", default=None, help="write the trained model's state_dict here (rank 0)")
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda:LOCAL_RANK with CUDA, else "
                   "cpu; TrainConfig.device)")
    p.add_argument("--trim", action="store_true",
                   help="layer i skips the nodes of the last i hops (PyG's trim_to_layer: the same outputs, less work; "
                        "homogeneous folders)")
    p.add_argument("--eval-steps", type=int, default=0,
                   help="evaluate on this many batches per rank (0: every validation / test seed)")
    p.add_argument("--stage-log", default=None,
                   help="rank 0 appends one JSON line per epoch here: every rank's seconds per stage (sampling, "
                        "rows, step, wait; pyg_dist.train.stages)")
    p.add_argument("--gpu-cache-mb", type=int, default=None,
                   help="keep this many MiB of the partition's hottest node rows on the GPU (TrainConfig."
                        "gpu_cache_bytes; needs CUDA)")
    return check_args(p, p.parse_args(argv))


def _target(fs, meta, wanted):
    if not meta.is_hetero:
        return None
    typed = [t for t in meta.node_types if "y" in fs.attr_names(t)]
    if wanted is not None and wanted not in typed:
        raise InvalidArgumentError("node_classification.py", "--target", wanted, f"a node type with labels: {typed}")
    return wanted or typed[0]


def build_model(env, args, target):
    """GraphSAGE (``to_hetero`` for a heterogeneous folder) and a ``batch -> (logits, labels)`` step."""
    meta = env.meta
    num_classes, in_dim = env.num_classes(target), env.num_features(target)
    trimmed = args.trim and target is None
    model = (TrimmedGraphSAGE if trimmed else GraphSAGE)(in_dim, args.hidden, num_classes, len(args.num_neighbors))
    if target is None:
        def step(m, b):
            trim = (b.num_sampled_nodes, b.num_sampled_edges) if args.trim else ()
            return m(b.x, b.edge_index, *trim)[:b.batch_size], b.y[:b.batch_size]
        return wrap_ddp(model, env), step
    from torch_geometric.nn import to_hetero
    model = to_hetero(model, (list(meta.node_types), list(meta.edge_types)), aggr="sum")

    def step(m, b):
        bs = b[target].batch_size
        return m(b.x_dict, b.edge_index_dict)[target][:bs], b[target].y[:bs]
    return wrap_ddp(model, env, find_unused_parameters=True), step


def train_epoch(model, step, loader, optimizer, env, args, epoch, ckpt):
    model.train()
    loss_sum = correct = total = 0.0
    bar, batches = steps(loader, args.max_steps, f"epoch {epoch}", args.quiet, start=ckpt.start_batch)
    for batch in batches:
        if not ckpt.global_step:  # the job's first batch: how long start-up took (process start to here)
            print0(env, f"first batch {process_age():.1f}s after the process started")
        batch = batch.to(env.device)
        optimizer.zero_grad()
        logits, y = step(model, batch)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()
        ckpt.step()  # a checkpoint when one is due (--checkpoint-dir)
        loss_sum += loss.item() * y.numel()
        correct += int((logits.argmax(-1) == y).sum())
        total += y.numel()
        set_loss(bar, loss_sum / max(total, 1))
    loss_sum, correct, total = all_sum([loss_sum, correct, total], env).tolist()
    return loss_sum / max(total, 1), correct / max(total, 1)


@torch.no_grad()
def evaluate(model, step, loader, env, max_steps=0):
    model.eval()
    correct = total = 0
    for batch in steps(loader, max_steps, quiet=True)[1]:
        logits, y = step(model, batch.to(env.device))
        correct += int((logits.argmax(-1) == y).sum())
        total += y.numel()
    correct, total = all_sum([correct, total], env).tolist()
    return correct / max(total, 1)


def main(argv=None) -> float:
    args = parse_args(argv)
    setup(args)
    torch.manual_seed(args.seed)
    config = TrainConfig(args.partition_dir, num_workers=args.num_workers, cache_ratio=args.cache_ratio,
                         cache_policy=args.cache_policy, cache_num_neighbors=args.num_neighbors,
                         remote_rows=args.remote_rows, device=args.device,
                         gpu_cache_bytes=None if args.gpu_cache_mb is None else args.gpu_cache_mb << 20,
                         **checkpoint_config(args))
    with dist_session(config) as env:
        meta = env.graph_store.partition_meta
        target = _target(env.feature_store, meta, args.target)

        have = set(env.feature_store.attr_names(target if target is not None else "_N"))

        def loader(mask, train):
            if mask not in have:  # e.g. the reference graph: train_mask only
                print0(env, f"the folder has no {mask}: evaluating on train_mask instead")
                mask = "train_mask"
            nodes = mask if target is None else (target, mask)
            return DistNeighborLoader(env, args.num_neighbors, input_nodes=nodes, batch_size=args.batch_size,
                                      shuffle=train, num_workers=args.num_workers, concurrency=args.concurrency,
                                      seed_split="balanced" if train else "partition", shuffle_seed=args.seed,
                                      seed=args.seed)

        train_loader = loader("train_mask", True)
        model, step = build_model(env, args, target)
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
        print0(env, f"world={env.world_size} partitions={meta.num_parts} method={meta.method} "
                    f"hetero={meta.is_hetero} batches_per_epoch={train_loader.num_batches} device={env.device}")
        val_loader = loader("val_mask", False)  # with workers: its own workers, alive beside train's
        ckpt = env.checkpointer(model=model, optimizer=optimizer, loaders={"train": train_loader, "val": val_loader})
        clock = EpochClock(env, train_loader, args.stage_log)
        try:
            resume(env, ckpt)
            for epoch in ckpt.epochs(args.epochs, train_loader):  # from the resumed epoch on, if any
                start = time.perf_counter()
                clock.start()
                loss, train_acc = train_epoch(model, step, train_loader, optimizer, env, args, epoch, ckpt)
                split = clock.stop(epoch)  # where this epoch's seconds went, every rank (collective)
                line = f"epoch={epoch:03d} loss={loss:.4f} train_acc={train_acc:.4f}"
                line += f" val_acc={evaluate(model, step, val_loader, env, args.eval_steps):.4f}"
                print0(env, f"{line} time={time.perf_counter() - start:.2f}s")
                print0(env, f"  {split.line()}")
            print0(env, clock.totals_line())
        finally:
            train_loader.shutdown()
            val_loader.shutdown()
        test_loader = loader("test_mask", False)
        try:
            test_acc = evaluate(model, step, test_loader, env, args.eval_steps)
        finally:
            test_loader.shutdown()
        if args.save_model and env.rank == 0:
            torch.save(model.state_dict(), args.save_model)
        print0(env, f"test_acc={test_acc:.4f}")
        return test_acc


if __name__ == "__main__":
    run_main(main, sys.argv[1:])
