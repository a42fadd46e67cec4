"""Optional native samplers (pyg-lib, torch-sparse), selectable with ``backend=`` for comparison only.

Both are whole multi-hop samplers; they are called through their heterogeneous entry points so a
homogeneous graph (one node type, one edge type) takes the same path. pyg_dist's own kernels stay the
default. NOTE: neither package installs on the development machine (no wheels for this torch), so this
adapter has not been exercised by the test suite; it follows the call conventions of PyG 2.6+.
"""
from __future__ import annotations

from typing import Dict, Optional

import torch
from torch import Tensor

from pyg_dist._types import NodeType, edge_type_str
from pyg_dist.errors import InvalidArgumentError


def _inputs(sampler):
    graph = sampler.graph
    rel = {et: edge_type_str(et) for et in graph.edge_types}
    colptr = {rel[et]: graph.csc[et].colptr for et in graph.edge_types}
    row = {rel[et]: graph.csc[et].row.long() for et in graph.edge_types}
    fanouts = {rel[et]: sampler._options.fanouts[et] for et in graph.edge_types}
    return graph, rel, colptr, row, fanouts


def _typed_output(graph, rel, node, row, col, edge, batch, n_nodes, n_edges) -> dict:
    """The fields of a :class:`pyg_dist.sampler.output.TypedSample`, keyed by edge-type tuples."""
    empty = torch.empty(0, dtype=torch.int64)
    by_et = {et: rel[et] for et in graph.edge_types}
    edges = {}
    for et, key in by_et.items():
        pos = edge.get(key, empty)
        edges[et] = graph.csc[et].edge_ids(pos)  # natives return CSC positions
    return dict(
        node={t: node.get(t, empty) for t in graph.node_types},
        row={et: row.get(k, empty) for et, k in by_et.items()},
        col={et: col.get(k, empty) for et, k in by_et.items()}, edge=edges, batch=batch,
        num_sampled_nodes={t: list(n_nodes.get(t, [])) for t in graph.node_types},
        num_sampled_edges={et: list(n_edges.get(k, [])) for et, k in by_et.items()})


def native_sample(sampler, seed: Dict[NodeType, Tensor], seed_time: Optional[Dict[NodeType, Tensor]]):
    """Runs ``sampler.backend`` ('pyg-lib' or 'torch-sparse'); returns the fields of a ``TypedSample``."""
    graph, rel, colptr, row, fanouts = _inputs(sampler)
    weight = {rel[et]: c.weight for et, c in graph.csc.items() if c.weight is not None} or None
    if sampler.backend == "torch-sparse":
        if sampler.disjoint or seed_time or weight:
            raise InvalidArgumentError("NeighborSampler", "backend", "torch-sparse",
                                       "'auto', 'numba' or 'torch' for disjoint, temporal or weighted sampling")
        import torch_sparse  # noqa: F401  (registers the op)
        node, r, c, e = torch.ops.torch_sparse.hetero_neighbor_sample(
            graph.node_types, list(rel.values()), colptr, row, seed, fanouts,
            sampler.num_neighbors.num_hops, sampler.replace, True)
        return _typed_output(graph, rel, node, r, c, e, None, {}, {})
    import pyg_lib  # noqa: F401  (registers the op)
    edge_time = {rel[et]: c.edge_time for et, c in graph.csc.items() if c.edge_time is not None} or None
    out = torch.ops.pyg.hetero_neighbor_sample(
        graph.node_types, list(rel.values()), colptr, row, seed, fanouts, graph.node_time or None, edge_time,
        seed_time, weight, True, sampler.replace, True, sampler.disjoint, sampler.temporal_strategy, True)
    r, c, node, e, n_nodes, n_edges = out[:6]
    batch = None
    if sampler.disjoint:
        batch = {t: v[:, 0].contiguous() for t, v in node.items()}
        node = {t: v[:, 1].contiguous() for t, v in node.items()}
    return _typed_output(graph, rel, node, r, c, e, batch, n_nodes, n_edges)
