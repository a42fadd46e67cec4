"""Temporal link regression in the shape of PyG's ``examples/distributed/pyg/temporal_link_movielens_cpu.py``.

Written from that example's steps (not copied): per rank the partition's ``LocalGraphStore`` /
``LocalFeatureStore``; identity features for the feature-less ``user`` nodes, sized from the feature store's own
dictionaries (``feature._global_id['user']``, ``feature._feat[('movie', 'x')]``) and added with
``feature.put_tensor``; a gloo process group; ``DistLinkNeighborLoader``s over the rank's rating edges with
``edge_label_time``, ``disjoint=True`` and ``time_attr='edge_time'`` (the folder's edge time, stored as the edge
attribute ``time`` in the input graph); a ``to_hetero`` GraphSAGE encoder and an MLP decoder under DDP. The only
change a PyG script needs is the import below (and the launcher: ``torchrun``)::

    python examples/distributed/pyg_compat/partition_temporal_graph.py --root_dir /tmp/ml
    torchrun --nproc-per-node 2 examples/distributed/pyg_compat/temporal_link_movielens_cpu.py \\
        --dataset_root_dir /tmp/ml --num_workers 2

Ends with ``test_rmse=<RMSE over every rank's test ratings> mean_rmse=<predicting the training mean>``.
"""
from __future__ import annotations

import argparse
import os
import os.path as osp

import torch
import torch.distributed
import torch.nn.functional as F
from torch.nn import Linear
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import SAGEConv, to_hetero

# was: import torch_geometric.distributed as pyg_dist / from torch_geometric.distributed import ...
import pyg_dist.distributed as pyg_dist
from pyg_dist.distributed import DistContext, LocalFeatureStore, LocalGraphStore

RATES = ("user", "rates", "movie")


class GNNEncoder(torch.nn.Module):
    def __init__(self, hidden, out):
        super().__init__()
        self.conv1, self.conv2 = SAGEConv((-1, -1), hidden), SAGEConv((-1, -1), out)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


class EdgeDecoder(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.lin1, self.lin2 = Linear(2 * hidden, hidden), Linear(hidden, 1)

    def forward(self, z_dict, edge_label_index):
        row, col = edge_label_index
        z = torch.cat([z_dict["user"][row], z_dict["movie"][col]], dim=-1)
        return self.lin2(self.lin1(z).relu()).view(-1)


class Model(torch.nn.Module):
    def __init__(self, hidden, metadata):
        super().__init__()
        self.encoder = to_hetero(GNNEncoder(hidden, hidden), metadata, aggr="sum")
        self.decoder = EdgeDecoder(hidden)

    def forward(self, x_dict, edge_index_dict, edge_label_index):
        return self.decoder(self.encoder(x_dict, edge_index_dict), edge_label_index)


def forward(model, batch):
    pred = model(batch.x_dict, batch.edge_index_dict, batch[RATES].edge_label_index)
    return pred, batch[RATES].edge_label.float()


def train(model, loader, optimizer):
    model.train()
    total = count = 0.0
    for batch in loader:
        optimizer.zero_grad()
        pred, target = forward(model, batch)
        loss = F.mse_loss(pred, target)
        loss.backward()
        optimizer.step()
        total, count = total + float(loss) * pred.numel(), count + pred.numel()
    torch.distributed.barrier()
    return total / max(count, 1)


@torch.no_grad()
def test(model, loader, mean):
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64)  # squared error, squared error of the mean, count
    for batch in loader:
        pred, target = forward(model, batch)
        pred = pred.clamp(min=1, max=5)
        sums += torch.tensor([float((pred - target).pow(2).sum()), float((mean - target).pow(2).sum()),
                              float(target.numel())], dtype=torch.float64)
    torch.distributed.all_reduce(sums)  # every rank's test ratings
    return float((sums[0] / sums[2]).sqrt()), float((sums[1] / sums[2]).sqrt())


def load_split(root, dataset, split, rank):
    folder = osp.join(root, f"{dataset}-{split}-partitions")
    return (torch.load(osp.join(folder, f"partition{rank}.pt")), torch.load(osp.join(folder, f"label{rank}.pt")),
            torch.load(osp.join(folder, f"time{rank}.pt")))


def run(args):
    rank, world = args.node_rank, args.num_nodes
    torch.manual_seed(args.seed)
    root = args.dataset_root_dir
    graph = LocalGraphStore.from_partition(osp.join(root, f"{args.dataset}-partitions"), rank)
    feature = LocalFeatureStore.from_partition(osp.join(root, f"{args.dataset}-partitions"), rank)
    # Identity user features for message passing, sized from the store's own dictionaries (as PyG's script):
    x = torch.eye(feature._global_id["user"].size(0), feature._feat[("movie", "x")].size(1))
    feature.put_tensor(x, group_name="user", attr_name="x")
    partition_data = (feature, graph)

    ctx = DistContext(world_size=world, rank=rank, global_world_size=world, global_rank=rank,
                      group_name="distributed-temporal-link-movielens")
    torch.distributed.init_process_group(backend="gloo", rank=ctx.rank, world_size=ctx.world_size,
                                         init_method=f"tcp://{args.master_addr}:{args.ddp_port}")
    loaders = {}
    for split, port in (("train", args.train_loader_port), ("test", args.test_loader_port)):
        index, label, time = load_split(root, args.dataset, split, rank)
        loaders[split] = pyg_dist.DistLinkNeighborLoader(
            data=partition_data, edge_label_index=(RATES, index), edge_label=label, edge_label_time=time,
            disjoint=True, time_attr="edge_time", temporal_strategy="uniform", current_ctx=ctx,
            device=torch.device("cpu"), num_neighbors=[int(i) for i in args.num_neighbors.split(",")],
            shuffle=split == "train", drop_last=split == "train", persistent_workers=args.num_workers > 0,
            batch_size=args.batch_size, num_workers=args.num_workers, master_addr=args.master_addr,
            master_port=port, concurrency=args.concurrency, async_sampling=True, seed=args.seed)
    train_label = load_split(root, args.dataset, "train", rank)[1]
    counts = torch.tensor([float(train_label.sum()), float(train_label.numel())], dtype=torch.float64)
    torch.distributed.all_reduce(counts)
    mean = float(counts[0] / counts[1])

    model = Model(hidden=32, metadata=(graph.meta["node_types"], [tuple(e) for e in graph.meta["edge_types"]]))
    with torch.no_grad(), loaders["train"] as iterator:  # lazy parameters: one forward pass first
        batch = next(iter(iterator))
        model(batch.x_dict, batch.edge_index_dict, batch[RATES].edge_label_index)
    torch.distributed.barrier()
    model = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for epoch in range(1, args.num_epochs + 1):
        loss = train(model, loaders["train"], optimizer)
        if rank == 0:
            print(f"epoch={epoch:03d} loss={loss:.4f}", flush=True)
    rmse, mean_rmse = test(model, loaders["test"], mean)
    for loader in loaders.values():
        loader.shutdown()
    if rank == 0:
        print(f"test_rmse={rmse:.6f} mean_rmse={mean_rmse:.6f}", flush=True)
    del model, optimizer  # DDP's reducer holds the process group: release it first (its gloo threads join there)
    torch.distributed.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    env = os.environ
    p.add_argument("--dataset", default="MovieLens")
    p.add_argument("--dataset_root_dir", required=True)
    p.add_argument("--num_nodes", type=int, default=int(env.get("WORLD_SIZE", 1)))
    p.add_argument("--node_rank", type=int, default=int(env.get("RANK", 0)))
    p.add_argument("--num_epochs", type=int, default=3)
    p.add_argument("--batch_size", type=int, default=256)
    p.add_argument("--num_neighbors", default="10,5")
    p.add_argument("--num_workers", type=int, default=0)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--seed", type=int, default=0)
    port = int(env.get("MASTER_PORT", 11111))
    p.add_argument("--master_addr", default=env.get("MASTER_ADDR", "localhost"))
    p.add_argument("--ddp_port", type=int, default=port, help="under torchrun: $MASTER_PORT (torchrun's store)")
    p.add_argument("--train_loader_port", type=int, default=port + 1)
    p.add_argument("--test_loader_port", type=int, default=port + 2)
    run(p.parse_args())


if __name__ == "__main__":
    main()
