"""Distributed layer-wise inference equals one-process full-graph inference (launch with torchrun).

    torchrun --standalone --nproc-per-node 2 examples/distributed/layerwise_inference.py \\
        --partition-dir /tmp/demo-2 [--target TYPE] [--sampled]

Builds a two-layer GraphSAGE with a fixed seed: plain ``SAGEConv`` layers on a homogeneous folder, a
``to_hetero`` GraphSAGE on a heterogeneous one (one ``to_hetero``-transformed layer per layer, so that each layer
can be called on its own). Every rank runs :func:`pyg_dist.layerwise_inference` over the nodes its partition
owns; then rank 0 runs the same model in one process on the whole graph, reassembled from the folder, and
prints ``max_abs_diff=<float>`` (largest difference of any output value, over the nodes of ``--target``, default
every node type) and ``nodes=<int>`` (how many nodes were compared: every node of those types, each computed by
the rank(s) serving its partition).
``--sampled`` also times sampled evaluation of the same nodes (``--num-neighbors``, ``--batch-size``) and prints
``layerwise_s=`` and ``sampled_s=``; ``--skip-check`` leaves out the one-process run (large graphs).
"""
from __future__ import annotations

import sys
import time

import torch

from common import parser, print0, setup
from pyg_dist import DistNeighborLoader, InvalidArgumentError, TrainConfig, dist_session, layerwise_inference
from pyg_dist.format import load_original_ids, read_meta
from pyg_dist.train.entry import run_main


class SageLayer(torch.nn.Module):
    """One SAGE layer (ReLU unless it is the last): what ``to_hetero`` turns into one heterogeneous layer."""

    def __init__(self, dim_out: int, act: bool):
        super().__init__()
        from torch_geometric.nn import SAGEConv
        self.conv, self.act = SAGEConv((-1, -1), dim_out), act

    def forward(self, x, edge_index):
        h = self.conv(x, edge_index)
        return h.relu() if self.act else h


def build_model(meta, in_dims, hidden: int, out_dim: int, seed: int) -> torch.nn.ModuleList:
    """The model's layers, their lazy sizes fixed by one call on an empty graph; parameters from ``seed``."""
    from torch_geometric.nn import to_hetero
    torch.manual_seed(seed)
    layers = torch.nn.ModuleList([SageLayer(hidden, True), SageLayer(out_dim, False)])
    if meta.is_hetero:
        layers = torch.nn.ModuleList(to_hetero(m, (meta.node_types, meta.edge_types), aggr="sum") for m in layers)
    x = {t: torch.zeros(0, d) for t, d in in_dims.items()}
    ei = {et: torch.empty(2, 0, dtype=torch.long) for et in meta.edge_types}
    with torch.no_grad():
        for layer in layers:
            x = layer(x, ei) if meta.is_hetero else {t: layer(v, ei[meta.edge_types[0]]) for t, v in x.items()}
    return layers


def callables(layers, hetero: bool):
    """What :func:`layerwise_inference` calls: the modules (hetero) or ``(x_src, x_dst, edge_index)`` wrappers."""
    if hetero:
        return list(layers)
    return [lambda xs, xd, ei, m=m: m((xs, xd), ei) for m in layers]


def full_graph(layers, root, hetero: bool):
    """The model on the whole graph in one process (original ids), reassembled from the folder."""
    from pyg_dist.testing.folders import reassemble
    meta, nodes, edges, *_ = reassemble(root)
    x = {t: nodes[t]["x"].float() for t in meta.node_types}
    ei = {et: edges[et]["edge_index_T"].t() for et in meta.edge_types}
    with torch.no_grad():
        for layer in layers:
            x = layer(x, ei) if hetero else {t: layer(v, ei[meta.edge_types[0]]) for t, v in x.items()}
    return x


def collect(env, root, ids, out, types):
    """Every rank's rows, in original ids, summed into one table per type, and how many ranks sent each row (more
    than one where several ranks serve one partition)."""
    import torch.distributed as dist
    orig = load_original_ids(root)
    table, seen = {}, {}
    for t in types:
        n = env.meta.num_nodes[t]
        table[t] = torch.zeros(n, out[t].size(-1), dtype=torch.float64)
        seen[t] = torch.zeros(n, dtype=torch.float64)
        table[t][orig[t][ids[t]]] = out[t].double()
        seen[t][orig[t][ids[t]]] = 1
        if dist.is_initialized() and env.world_size > 1:
            dist.all_reduce(table[t])
            dist.all_reduce(seen[t])
    return table, seen


@torch.no_grad()
def time_sampled(env, args, layers, types) -> float:
    """Seconds to evaluate the same nodes with sampled neighbourhoods (``--num-neighbors``): load and forward."""
    hetero = env.meta.is_hetero
    start = time.perf_counter()
    for t in types:
        nodes = env.graph_store.book.owned_ids(t, env.graph_store.partition)
        loader = DistNeighborLoader(env, args.num_neighbors, input_nodes=nodes if not env.meta.is_hetero else
                                    (t, nodes), batch_size=args.batch_size, seed_split="partition")
        try:
            for batch in loader:
                x = batch.x_dict if hetero else batch.x.float()
                for layer in layers:
                    x = layer(x, batch.edge_index_dict) if hetero else layer(x, batch.edge_index)
        finally:
            loader.shutdown()
    return time.perf_counter() - start


def main(argv=None) -> float:
    p = parser(__doc__)
    p.add_argument("--target", default=None, help="node type whose outputs are compared (default: every type)")
    p.add_argument("--inference-batch-size", type=int, default=4096, help="destinations per layer-wise step")
    p.add_argument("--sampled", action="store_true", help="also time sampled evaluation of the same nodes")
    p.add_argument("--skip-check", action="store_true", help="no one-process full-graph run (large graphs)")
    args = p.parse_args(argv)
    meta = read_meta(args.partition_dir)
    types = list(meta.node_types) if args.target is None else [args.target]
    if args.target is not None and args.target not in meta.node_types:
        raise InvalidArgumentError("layerwise_inference.py", "--target", args.target, f"one of {meta.node_types}")
    setup(args)
    with dist_session(TrainConfig(args.partition_dir, num_workers=0)) as env:
        in_dims = {t: env.num_features(t if meta.is_hetero else None) for t in meta.node_types}
        layers = build_model(meta, in_dims, args.hidden, 8, args.seed)
        start = time.perf_counter()
        ids, out = layerwise_inference(callables(layers, meta.is_hetero), env, batch_size=args.inference_batch_size)
        took = time.perf_counter() - start
        if not meta.is_hetero:
            ids, out = {meta.node_types[0]: ids}, {meta.node_types[0]: out}
        if args.sampled:
            print0(env, f"layerwise_s={took:.2f} sampled_s={time_sampled(env, args, layers, types):.2f}")
        if args.skip_check:
            return 0.0
        table, seen = collect(env, args.partition_dir, ids, out, types)
        if env.rank != 0:
            return 0.0
        expected = full_graph(layers, args.partition_dir, meta.is_hetero)
        if not all(bool((seen[t] >= 1).all()) for t in types):
            raise InvalidArgumentError("layerwise_inference.py", "--partition-dir", args.partition_dir,
                                       "a folder whose every node is owned by a partition")
        diff = max(float((table[t] / seen[t].unsqueeze(-1) - expected[t].double()).abs().max())
                   if seen[t].numel() else 0.0 for t in types)
        print0(env, f"max_abs_diff={diff:.3e}")
        print0(env, f"nodes={sum(seen[t].numel() for t in types)}")
        return diff


if __name__ == "__main__":
    run_main(main, sys.argv[1:])
