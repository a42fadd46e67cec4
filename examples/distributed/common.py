"""Pieces shared by the distributed examples: the model, argument parsing, rank-0 printing."""
from __future__ import annotations

import argparse
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv


class GraphSAGE(torch.nn.Module):
    """``num_layers`` SAGE layers with ReLU and dropout between them."""

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


def fanouts(text: str) -> List[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--num-neighbors got {text!r}; expected e.g. 10,5") from None
    if not values or any(v < -1 or v == 0 for v in values):
        raise argparse.ArgumentTypeError(f"--num-neighbors got {text!r}; expected positive ints or -1")
    return values


def base_parser(doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--partition-dir", required=True, help="folder written by pyg-dist-partition")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--num-neighbors", type=fanouts, default=[10, 5])
    p.add_argument("--num-workers", type=int, default=0, help="sampler workers per trainer (they join RPC)")
    p.add_argument("--concurrency", type=int, default=1,
                   help="batches in flight per trainer (num_workers=0: sampled while the step trains; >1 is not "
                        "bit-reproducible)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=0, help="stop each epoch after this many batches (0: all)")
    return p


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    for name in ("epochs", "batch_size", "hidden"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} got {getattr(args, name)}; expected a positive int")
    for name in ("num_workers", "max_steps"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} got {getattr(args, name)}; expected a non-negative int")
    return args


def print0(env, *parts, **kw) -> None:
    """Prints on rank 0 only (flushed: torchrun interleaves the ranks' output)."""
    if env.rank == 0:
        print(*parts, flush=True, **kw)


def steps(loader, max_steps: Optional[int]):
    """Iterates ``loader``, stopping after ``max_steps`` batches when set (every rank alike)."""
    for i, batch in enumerate(loader):
        if max_steps and i >= max_steps:
            break
        yield batch
