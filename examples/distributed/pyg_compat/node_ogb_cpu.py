"""GraphSAGE node classification in the shape of PyG's deleted ``examples/distributed/pyg/node_ogb_cpu.py``.

Written from PyG's distributed tutorial (not copied): per rank a ``DistContext``, the partition's
``LocalGraphStore`` / ``LocalFeatureStore`` (labels attached as ``feature.labels``), a DDP process group
and ``DistNeighborLoader``s for training and testing. The only change a PyG script needs is the import
below (and the launcher: ``torchrun`` instead of PyG's ssh launcher)::

    torchrun --nproc-per-node 2 examples/distributed/pyg_compat/node_ogb_cpu.py \\
        --dataset synthetic --dataset_root_dir /tmp/pyg-compat

Rank, world size, address and ports default to torchrun's environment. Prints one line per epoch on
rank 0 and ends with ``test_acc=<accuracy over every rank's test nodes>``.
"""
from __future__ import annotations

import argparse
import os
import os.path as osp
import time

import torch
import torch.distributed
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import GraphSAGE, to_hetero

# was: from torch_geometric.distributed import (...)
from pyg_dist.distributed import DistContext, DistNeighborLoader, LocalFeatureStore, LocalGraphStore

TARGET = "paper"


def forward(model, batch, is_hetero):
    """Logits and labels of the batch's seed nodes."""
    if is_hetero:
        out = model(batch.x_dict, batch.edge_index_dict)[TARGET][:batch[TARGET].batch_size]
        return out, batch[TARGET].y[:batch[TARGET].batch_size]
    return model(batch.x, batch.edge_index)[:batch.batch_size], batch.y[:batch.batch_size]


@torch.no_grad()
def test(model, loader, is_hetero):
    model.eval()
    counts = torch.zeros(2)
    for batch in loader:
        out, y = forward(model, batch, is_hetero)
        counts += torch.tensor([float((out.argmax(-1) == y).sum()), float(y.numel())])
    torch.distributed.all_reduce(counts)  # every rank's test nodes
    return float(counts[0] / counts[1].clamp(min=1))


def run_proc(args):
    is_hetero = args.dataset in ("ogbn-mag", "synthetic-hetero")
    root = args.dataset_root_dir
    rank, world = args.node_rank, args.num_nodes
    print(f"--- [{rank}] Loading data partition files ...", flush=True)
    train_idx = torch.load(osp.join(root, f"{args.dataset}-train-partitions", f"partition{rank}.pt"))
    test_idx = torch.load(osp.join(root, f"{args.dataset}-test-partitions", f"partition{rank}.pt"))
    if is_hetero:
        train_idx, test_idx = (TARGET, train_idx), (TARGET, test_idx)
    graph = LocalGraphStore.from_partition(osp.join(root, f"{args.dataset}-partitions"), rank)
    feature = LocalFeatureStore.from_partition(osp.join(root, f"{args.dataset}-partitions"), rank)
    feature.labels = torch.load(osp.join(root, f"{args.dataset}-label", "label.pt"))
    partition_data = (feature, graph)

    current_ctx = DistContext(world_size=world, rank=rank, global_world_size=world, global_rank=rank,
                              group_name="distributed-sage")
    torch.distributed.init_process_group(backend="gloo", rank=rank, world_size=world,
                                         init_method=f"tcp://{args.master_addr}:{args.ddp_port}")
    num_neighbors = [int(i) for i in args.num_neighbors.split(",")]
    common = dict(data=partition_data, current_ctx=current_ctx, num_neighbors=num_neighbors,
                  batch_size=args.batch_size, num_workers=args.num_workers, master_addr=args.master_addr,
                  concurrency=args.concurrency, async_sampling=args.async_sampling,
                  persistent_workers=args.num_workers > 0, device=torch.device("cpu"))
    train_loader = DistNeighborLoader(input_nodes=train_idx, shuffle=True, drop_last=True,
                                      master_port=args.train_loader_port, **common)
    test_loader = DistNeighborLoader(input_nodes=test_idx, shuffle=False, drop_last=False,
                                     master_port=args.test_loader_port, **common)

    torch.manual_seed(0)
    num_classes = int(feature.labels.max()) + 1
    model = GraphSAGE(-1, args.hidden, num_layers=len(num_neighbors), out_channels=num_classes)
    if is_hetero:
        model = to_hetero(model, (graph.node_types, graph.edge_types))
    with torch.no_grad():  # materialise the lazy layers on the first batch
        forward(model, next(iter(test_loader)), is_hetero)
    model = DistributedDataParallel(model, find_unused_parameters=is_hetero)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for epoch in range(1, args.num_epochs + 1):
        model.train()
        start, total = time.time(), 0.0
        for batch in train_loader:
            optimizer.zero_grad()
            out, y = forward(model, batch, is_hetero)
            loss = F.cross_entropy(out, y)
            loss.backward()
            optimizer.step()
            total += loss.item()
        torch.distributed.barrier()
        if rank == 0:
            print(f"epoch={epoch:03d} loss={total / max(len(train_loader), 1):.4f} "
                  f"seconds={time.time() - start:.2f}", flush=True)
    acc = test(model, test_loader, is_hetero)
    for loader in (train_loader, test_loader):
        loader.shutdown()
    if rank == 0:
        print(f"test_acc={acc:.4f}", flush=True)


def parse_args():
    env = os.environ
    port = int(env.get("MASTER_PORT", 11111))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="synthetic")
    p.add_argument("--dataset_root_dir", required=True, help="--root_dir of partition_graph.py")
    p.add_argument("--num_nodes", type=int, default=int(env.get("WORLD_SIZE", 1)), help="ranks (= partitions)")
    p.add_argument("--node_rank", type=int, default=int(env.get("RANK", 0)))
    p.add_argument("--master_addr", default=env.get("MASTER_ADDR", "127.0.0.1"))
    p.add_argument("--ddp_port", type=int, default=port, help="under torchrun: $MASTER_PORT (torchrun's store)")
    p.add_argument("--train_loader_port", type=int, default=port + 1)
    p.add_argument("--test_loader_port", type=int, default=port + 2)
    p.add_argument("--num_epochs", type=int, default=3)
    p.add_argument("--batch_size", type=int, default=256)
    p.add_argument("--num_neighbors", default="10,5")
    p.add_argument("--async_sampling", type=lambda s: s.lower() in ("1", "true", "yes"), default=True)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--num_workers", type=int, default=0)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    return p.parse_args()


if __name__ == "__main__":
    run_proc(parse_args())
