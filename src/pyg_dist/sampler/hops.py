"""The multi-hop loop: hop after hop, edge type after edge type, one fused :func:`sample_hop` each.

Homogeneous and heterogeneous graphs share this loop (a homogeneous graph is one node type and one
edge type). The frontier of node type ``t`` at hop ``h`` is the nodes of ``t`` first seen at hop
``h - 1`` (the seeds at hop 0); nodes found through one edge type within a hop are not expanded by
another edge type in the same hop.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
from torch import Tensor

from pyg_dist._types import EdgeType, NodeType
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.ops import CSC, make_edge_buffer, make_relabeler, sample_hop
from pyg_dist.sampler.output import TypedSample


@dataclass(frozen=True)
class TypedGraph:
    """Everything the hop loop reads: per edge type a CSC indexed by the GLOBAL destination id."""

    node_types: List[NodeType]
    edge_types: List[EdgeType]
    num_nodes: Dict[NodeType, int]
    csc: Dict[EdgeType, CSC]
    node_time: Optional[Dict[NodeType, Tensor]] = None
    edge_time: Optional[Dict[EdgeType, Tensor]] = None

    @property
    def is_temporal(self) -> bool:
        return self.node_time is not None or self.edge_time is not None


@dataclass(frozen=True)
class HopOptions:
    """Validated sampling options (``backend`` already resolved to 'numba' or 'torch')."""

    fanouts: Dict[EdgeType, List[int]]
    num_hops: int
    replace: bool = False
    disjoint: bool = False
    temporal_strategy: str = "uniform"
    backend: str = "torch"
    pools: Dict[NodeType, list] = field(default_factory=dict)


def _add_seeds(rel, seed: Dict[NodeType, Tensor], disjoint: bool) -> None:
    for t, ids in seed.items():
        batch = torch.arange(ids.numel(), device=ids.device) if disjoint else None
        before = rel[t].size
        rel[t].add(ids, batch)
        if rel[t].size - before != ids.numel():
            raise InvalidArgumentError("NeighborSampler.sample_typed", "seed", ids,
                                       f"unique ids of node type {t!r} (duplicates need disjoint=True)")


def _batch_time(seed: Dict[NodeType, Tensor], seed_time: Optional[Dict[NodeType, Tensor]]):
    """Time of each subgraph (= of its seed); seeds of several types share subgraph ids by position."""
    if not seed_time:
        return None
    size = max(v.numel() for v in seed_time.values())
    dtype = next(iter(seed_time.values())).dtype
    out = torch.zeros(size, dtype=dtype)
    for t, time in seed_time.items():
        out[:time.numel()] = time
    return out


def _frontier_time(graph: TypedGraph, et: EdgeType, batch_time, sb):
    """Seed times for one edge type's frontier, or None when the edge type carries no time."""
    if batch_time is None:
        return None
    has_time = graph.csc[et].edge_time is not None or (graph.node_time or {}).get(et[0]) is not None
    return batch_time[sb] if has_time else None


def sample_hops(graph: TypedGraph, opts: HopOptions, seed: Dict[NodeType, Tensor],
                seed_time: Optional[Dict[NodeType, Tensor]] = None,
                generator: Optional[torch.Generator] = None) -> TypedSample:
    """Runs ``opts.num_hops`` hops from ``seed`` (trusted, validated by the caller)."""
    cap = _capacity(opts, sum(v.numel() for v in seed.values()))
    rel = {t: make_relabeler(graph.num_nodes[t], opts.disjoint, opts.backend, pool=opts.pools.get(t),
                             capacity=min(cap, graph.num_nodes[t]) + 1) for t in graph.node_types}
    try:
        _add_seeds(rel, seed, opts.disjoint)
        batch_time = _batch_time(seed, seed_time)
        buffers = {et: make_edge_buffer(opts.backend, cap) for et in graph.edge_types}
        n_nodes = {t: [rel[t].size] for t in graph.node_types}
        n_edges = {et: [] for et in graph.edge_types}
        bounds = {t: (0, rel[t].size) for t in graph.node_types}
        for hop in range(opts.num_hops):
            starts = {t: rel[t].size for t in graph.node_types}
            for et in graph.edge_types:
                src, _, dst = et
                k, (lo, hi) = opts.fanouts[et][hop], bounds[dst]
                if k == 0 or hi == lo:
                    n_edges[et].append(0)
                    continue
                sb = rel[dst].batch[lo:hi] if opts.disjoint else None
                out = sample_hop(graph.csc[et], rel[dst].nodes[lo:hi], lo, k, rel[src],
                                 replace=opts.replace, temporal_strategy=opts.temporal_strategy,
                                 node_time=(graph.node_time or {}).get(src),
                                 seed_time=_frontier_time(graph, et, batch_time, sb), seed_batch=sb,
                                 backend=opts.backend, generator=generator, out=buffers[et])
                n_edges[et].append(out.row.numel())
            bounds = {t: (starts[t], rel[t].size) for t in graph.node_types}
            for t in graph.node_types:
                n_nodes[t].append(rel[t].size - starts[t])
        rce = {et: b.tensors() for et, b in buffers.items()}
        return TypedSample(
            node={t: rel[t].nodes for t in graph.node_types},
            row={et: v[0] for et, v in rce.items()}, col={et: v[1] for et, v in rce.items()},
            edge={et: v[2] for et, v in rce.items()},
            batch={t: rel[t].batch for t in graph.node_types} if opts.disjoint else None,
            num_sampled_nodes=n_nodes, num_sampled_edges=n_edges)
    finally:
        for r in rel.values():
            r.close()


def _capacity(opts: HopOptions, num_seeds: int) -> int:
    """A first guess of one edge type's output size. Buffers grow when it is short, and capacity that
    is never written is never touched, so a generous guess costs address space only."""
    total, width = 0, num_seeds
    for hop in range(opts.num_hops):
        ks = [f[hop] for f in opts.fanouts.values()]
        width *= 16 if min(ks) < 0 else max(max(ks), 1)
        total += width
    return min(total, 1 << 24)


__all__ = ["TypedGraph", "HopOptions", "sample_hops"]
