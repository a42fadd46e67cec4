"""One-machine demo: GraphSAGE trained with ``pyg_dist.NeighborLoader``.

Runs offline on a generated graph by default, or on Cora / CiteSeer when given a folder holding their
raw Planetoid files::

    python examples/train_local.py                                   # synthetic graph, 10k nodes
    python examples/train_local.py --dataset cora --root "$PYG_DIST_DATA/planetoid"

Prints the loss and validation accuracy of every epoch and, last, ``test_acc=<float>``.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time

import torch
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv

import pyg_dist
from pyg_dist.ops import warmup
from pyg_dist.train.entry import progress, run_main, setup_logging

LOG = logging.getLogger("examples")

#: Arguments of ``pyg_dist.synthetic_graph`` for the default dataset: 8 classes (chance 12.5 %), features
#: so noisy that an MLP on them alone reaches ~28 % while GraphSAGE over neighbours reaches ~93 %.
SYNTHETIC = dict(avg_degree=10.0, num_features=32, num_classes=8, community_size=200, intra_frac=0.85,
                 noise=6.0)


class GraphSAGE(torch.nn.Module):
    """``len(num_neighbors)`` SAGE layers with ReLU and dropout between them."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, num_layers: int, dropout: float = 0.5):
        super().__init__()
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        self.convs = torch.nn.ModuleList(SAGEConv(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = F.dropout(F.relu(x), p=self.dropout, training=self.training)
        return x


def parse_args(argv=None) -> argparse.Namespace:
    def fanouts(text: str):
        try:
            values = [int(v) for v in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"--num-neighbors got {text!r}; expected e.g. 10,5") from None
        if not values or any(v < -1 or v == 0 for v in values):
            raise argparse.ArgumentTypeError(f"--num-neighbors got {text!r}; expected positive ints or -1")
        return values

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", choices=["synthetic", "cora", "citeseer"], default="synthetic")
    p.add_argument("--root", default=None, help="folder with <Name>/raw or planetoid/<Name>/raw "
                   "(default: pyg_dist.datasets.shared_data_root())")
    p.add_argument("--num-nodes", type=int, default=10_000, help="nodes of the synthetic graph")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--num-neighbors", type=fanouts, default=[10, 5])
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress bar, no start-up messages")
    args = p.parse_args(argv)
    for name in ("num_nodes", "epochs", "batch_size", "hidden"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} got {getattr(args, name)}; expected a positive int")
    if args.num_workers < 0:
        p.error(f"--num-workers got {args.num_workers}; expected a non-negative int")
    return args


def load_graph(args: argparse.Namespace):
    if args.dataset == "synthetic":
        return pyg_dist.synthetic_graph(args.num_nodes, seed=args.seed, **SYNTHETIC)
    return pyg_dist.load_planetoid(args.dataset, args.root)


def run_epoch(model, loader, optimizer, device, desc: str = "", quiet: bool = True) -> float:
    model.train()
    total_loss, total = 0.0, 0
    bar = progress(loader, desc, len(loader), quiet)
    for batch in bar:
        batch = batch.to(device)
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        loss = F.cross_entropy(out, batch.y[:batch.batch_size])
        loss.backward()
        optimizer.step()
        total_loss += loss.item() * batch.batch_size
        total += batch.batch_size
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(loss=f"{total_loss / max(total, 1):.4f}", refresh=False)
    return total_loss / max(total, 1)


@torch.no_grad()
def accuracy(model, loader, device) -> float:
    model.eval()
    correct = total = 0
    for batch in loader:
        batch = batch.to(device)
        pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(-1)
        correct += int((pred == batch.y[:batch.batch_size]).sum())
        total += batch.batch_size
    return correct / max(total, 1)


def main(argv=None) -> float:
    args = parse_args(argv)
    setup_logging(args.quiet)
    warmup()
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = load_graph(args)
    num_classes = int(data.y.max()) + 1
    LOG.info(f"dataset={args.dataset} nodes={data.num_nodes} edges={data.num_edges} "
             f"features={data.num_features} classes={num_classes} device={device}")

    def loader(mask, shuffle):
        return pyg_dist.NeighborLoader(data, args.num_neighbors, input_nodes=mask, batch_size=args.batch_size,
                                       shuffle=shuffle, num_workers=args.num_workers)

    train_loader, val_loader, test_loader = (loader(data.train_mask, True), loader(data.val_mask, False),
                                             loader(data.test_mask, False))
    model = GraphSAGE(data.num_features, args.hidden, num_classes, len(args.num_neighbors)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        loss = run_epoch(model, train_loader, optimizer, device, f"epoch {epoch}", args.quiet)
        val_acc = accuracy(model, val_loader, device)
        LOG.info(f"epoch={epoch:03d} loss={loss:.4f} val_acc={val_acc:.4f} time={time.perf_counter() - start:.2f}s")
    test_acc = accuracy(model, test_loader, device)
    LOG.info(f"test_acc={test_acc:.4f}")
    return test_acc


if __name__ == "__main__":
    run_main(main, sys.argv[1:])
