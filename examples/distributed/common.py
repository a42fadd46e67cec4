"""What the distributed examples share: the models, the one argument parser, logging, progress bars."""
from __future__ import annotations

import argparse
import itertools
import logging
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
        return self.layers(x, edge_index)

    def layers(self, x: torch.Tensor, edge_index: torch.Tensor, num_sampled_nodes: Optional[List[int]] = None,
               num_sampled_edges: Optional[List[int]] = None) -> torch.Tensor:
        """The layers; with a batch's ``num_sampled_nodes`` / ``num_sampled_edges``, layer ``i`` drops the nodes
        and edges of the last ``i`` hops first (PyG's ``trim_to_layer``: the seeds' outputs are the same, computed
        on fewer rows)."""
        for i, conv in enumerate(self.convs):
            if num_sampled_nodes is not None:
                from torch_geometric.utils import trim_to_layer
                x, edge_index, _ = trim_to_layer(i, num_sampled_nodes, num_sampled_edges, x, edge_index)
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = F.dropout(F.relu(x), p=self.dropout, training=self.training)
        return x


class TrimmedGraphSAGE(GraphSAGE):
    """:class:`GraphSAGE` whose forward takes the batch's per-hop counts too (``--trim``; homogeneous batches:
    ``to_hetero`` traces the plain two-argument forward)."""

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, num_sampled_nodes: Optional[List[int]] = None,
                num_sampled_edges: Optional[List[int]] = None) -> torch.Tensor:
        return self.layers(x, edge_index, num_sampled_nodes, num_sampled_edges)


class LinkModel(torch.nn.Module):
    """GraphSAGE embeddings with a dot-product decoder: one logit per ``edge_label_index`` pair."""

    def __init__(self, in_dim: int, hidden: int, num_layers: int):
        super().__init__()
        self.encoder = GraphSAGE(in_dim, hidden, hidden, num_layers)

    def forward(self, x, edge_index, edge_label_index):
        h = self.encoder(x, edge_index)
        return (h[edge_label_index[0]] * h[edge_label_index[1]]).sum(-1)


def fanouts(text: str) -> List[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--num-neighbors got {text!r}; expected e.g. 10,5") from None
    if not values or any(v < -1 or v == 0 for v in values):
        raise argparse.ArgumentTypeError(f"--num-neighbors got {text!r}; expected positive ints or -1")
    return values


LOG = logging.getLogger("examples")


def parser(doc: str, *, folder: bool = True, epochs: bool = False, workers: bool = False,
           concurrency: bool = False, max_steps: bool = False, checkpoints: bool = False,
           graph: bool = False) -> argparse.ArgumentParser:
    """The one parser of the examples here. Each flag that several of them share is declared below, once; an
    example picks the sets it has, adds its own flags and changes a shared default with ``set_defaults``.

    Always ``--batch-size``, ``--num-neighbors``, ``--seed``. ``folder``: a trainer on a partition folder
    (``--partition-dir``, ``--hidden``, ``--lr``, ``--quiet``). ``checkpoints``: ``--checkpoint-*``.
    ``graph``: a graph to generate and partition (``--num-nodes``, ``--num-parts``, ``--method``). The other
    switches: the one flag each names."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    if folder:
        p.add_argument("--partition-dir", required=True, help="folder written by pyg-dist-partition")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--num-neighbors", type=fanouts, default=[10, 5])
    p.add_argument("--seed", type=int, default=0)
    if folder:
        p.add_argument("--hidden", type=int, default=64)
        p.add_argument("--lr", type=float, default=0.01, help="Adam's learning rate (of the dense layers)")
        p.add_argument("--quiet", action="store_true", help="no progress bars, no start-up messages")
    if epochs:
        p.add_argument("--epochs", type=int, default=5)
    if workers:
        p.add_argument("--num-workers", type=int, default=0, help="sampler workers per trainer (they join RPC)")
    if concurrency:
        p.add_argument("--concurrency", type=int, default=1,
                       help="batches in flight per trainer (num_workers=0: sampled while the step trains; "
                            "batches are the same whatever it is)")
    if max_steps:
        p.add_argument("--max-steps", type=int, default=0,
                       help="stop each epoch after this many batches (0: all); TMA with --interval-steps: the "
                            "steps of every trainer")
    if checkpoints:
        p.add_argument("--checkpoint-dir", default=None,
                       help="write checkpoints here; a run started on a folder holding one resumes from it exactly")
        p.add_argument("--checkpoint-every", type=int, default=None, help="checkpoint every this many steps")
        p.add_argument("--checkpoint-interval", type=float, default=None,
                       help="checkpoint every this many seconds (default 60 when --checkpoint-every is not given)")
    if graph:
        p.add_argument("--num-nodes", type=int, default=20_000, help="nodes of the generated graph")
        p.add_argument("--num-parts", type=int, default=2, help="partitions of the generated graph (= trainers)")
        p.add_argument("--method", default="metis", choices=["metis", "random", "supernode", "hybrid"],
                       help="partition method of the generated graph")
    return p


def checkpoint_config(args: argparse.Namespace) -> dict:
    """The ``TrainConfig`` arguments of ``--checkpoint-*``."""
    return {"checkpoint_dir": args.checkpoint_dir, "checkpoint_every": args.checkpoint_every,
            "checkpoint_interval": args.checkpoint_interval}


def resume(env, ckpt) -> None:
    """Resumes from ``--checkpoint-dir``'s last complete checkpoint, if any, and says so on rank 0."""
    if ckpt.resume():
        print0(env, f"resumed from {ckpt.resumed_from} at epoch {ckpt.epoch}, batch {ckpt.batch} "
                    f"(step {ckpt.global_step})")


#: Flags that must be positive, or not negative, where an example has them.
POSITIVE = ("epochs", "batch_size", "hidden", "num_nodes", "num_parts", "eval_negatives")
NON_NEGATIVE = ("num_workers", "max_steps", "eval_steps")


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    for name in POSITIVE:
        if getattr(args, name, 1) <= 0:
            p.error(f"--{name.replace('_', '-')} got {getattr(args, name)}; expected a positive int")
    for name in NON_NEGATIVE:
        if getattr(args, name, 0) < 0:
            p.error(f"--{name.replace('_', '-')} got {getattr(args, name)}; expected a non-negative int")
    return args


def setup(args: argparse.Namespace) -> None:
    """Logging (rank 0 prints INFO lines on stdout) and the sampling kernels loaded up front (the first
    run on a machine compiles them, announced with its duration, instead of inside the first batch)."""
    from pyg_dist.ops import warmup
    from pyg_dist.train.entry import setup_logging
    setup_logging(args.quiet)
    warmup()


def print0(env, line: str) -> None:
    """A result line (logged at INFO: shown on rank 0, whose log level is INFO, only)."""
    LOG.info(line)


def steps(loader, max_steps: Optional[int], desc: str = "", quiet: bool = False, start: int = 0):
    """``(bar, batches)``: iterates ``loader`` (stopping after ``max_steps`` batches when set, every
    rank alike) inside a progress bar on rank 0 (``bar.set_postfix(loss=...)`` shows the loss). ``start``:
    batches of this epoch already trained (a resumed epoch; the loader starts after them)."""
    from pyg_dist.train.entry import progress
    total = (min(len(loader), max_steps) if max_steps else len(loader)) - start
    bar = progress(range(max(total, 0)), desc, max(total, 0), quiet)

    def batches():
        if total <= 0:  # a resumed epoch that was already complete
            return
        for batch in itertools.islice(loader, total):  # no batch fetched past the last one used
            yield batch
            if hasattr(bar, "update"):
                bar.update(1)
        if hasattr(bar, "close"):
            bar.close()
    return bar, batches()


def set_loss(bar, loss: float) -> None:
    """Shows the running loss on the progress bar (no-op without one)."""
    if hasattr(bar, "set_postfix"):
        bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
