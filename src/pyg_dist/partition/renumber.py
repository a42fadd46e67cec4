"""Relabelling: new node ids make each partition (and trainer share) a contiguous range per node type;
new edge ids follow the destination-sorted (CSC) order, so each partition's in-edges are contiguous too.

Pure functions over tensors; the writer saves what they return.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

import torch
from torch import Tensor

from pyg_dist._types import EdgeType, NodeType
from pyg_dist.ops.graph_kernels import relabel_csc
from pyg_dist.partition.source import TypedGraph


@dataclass
class NodeOrder:
    """New node order of one node type.

    Attributes:
        perm: ``perm[new] = original`` id.
        inv: ``inv[original] = new`` id.
        bounds: ``[num_parts + 1]`` partition ranges of the new ids.
        sub_bounds: ``[num_parts * sub_parts + 1]`` trainer ranges.
    """
    perm: Tensor
    inv: Tensor
    bounds: Tensor
    sub_bounds: Tensor


@dataclass
class EdgeOrder:
    """New edge order of one edge type (sorted by new destination; ties by edge time or input order).

    Attributes:
        perm: ``perm[new] = original`` edge id.
        row: New source id of every edge, in new edge order.
        col: New destination id of every edge, in new edge order.
        colptr: ``[num_dst + 1]`` CSC pointer over all destination nodes.
        bounds: ``[num_parts + 1]`` edge ranges (an edge belongs to its destination's owner).
        within_dst: ``"edge_time"`` or ``"input"``: the order of edges sharing a destination.
    """
    perm: Tensor
    row: Tensor
    col: Tensor
    colptr: Tensor
    bounds: Tensor
    within_dst: str


def order_nodes(part: Tensor, sub: Tensor, num_parts: int, sub_parts: int) -> NodeOrder:
    """Stable sort of nodes by (partition, trainer share): original order is kept inside a share.

    Example:
        >>> o = order_nodes(torch.tensor([1, 0, 1, 0]), torch.zeros(4, dtype=torch.long), 2, 1)
        >>> o.perm.tolist(), o.bounds.tolist()
        ([1, 3, 0, 2], [0, 2, 4])
    """
    key = part * sub_parts + sub
    sorted_key, perm = torch.sort(key, stable=True)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel())
    bounds = torch.searchsorted(sorted_key, torch.arange(num_parts + 1) * sub_parts)
    sub_bounds = torch.searchsorted(sorted_key, torch.arange(num_parts * sub_parts + 1))
    return NodeOrder(perm, inv, bounds, sub_bounds)


def order_edges(edge_index: Tensor, src: NodeOrder, dst: NodeOrder, num_dst: int,
                edge_time: Optional[Tensor] = None) -> EdgeOrder:
    """CSC order of one edge type under the new node ids (one linear-time counting pass)."""
    order_in, within = None, "input"
    if edge_time is not None:
        order_in, within = torch.sort(edge_time, stable=True).indices, "edge_time"
    perm, row, col, colptr = relabel_csc(edge_index, src.inv, dst.inv, num_dst, order_in)
    return EdgeOrder(perm, row, col, colptr, colptr[dst.bounds], within)


def relabel(g: TypedGraph, parts: Dict[NodeType, Tensor], subs: Dict[NodeType, Tensor], num_parts: int,
            sub_parts: int):
    """New node and edge orders for every type: ``(Dict[NodeType, NodeOrder], Dict[EdgeType, EdgeOrder])``."""
    nodes = {t: order_nodes(parts[t], subs[t], num_parts, sub_parts) for t in g.node_types}
    edges: Dict[EdgeType, EdgeOrder] = {}
    for et, ei in g.edge_index.items():
        edges[et] = order_edges(ei, nodes[et[0]], nodes[et[2]], g.num_nodes[et[2]], g.edge_time.get(et))
    return nodes, edges
