"""Induced subgraphs (``subgraph_type='induced'``, PyG's deprecated ``directed=False``).

PyG's semantics (``NeighborSampler._sample`` hands ``SubgraphType.induced`` to torch-sparse's
``neighbor_sample(..., directed=False)``): the nodes are those directional sampling with the same key
gives; the edges are, for EVERY edge type (whatever its fanout), all edges of the graph whose source
and destination were both sampled. ``edge`` holds their true edge ids, ``row`` / ``col`` local indices.

How (one code path for one machine and a partitioned graph): after the hops, one more "hop" with full
fanout over every sampled node of each edge type's destination type, routed like any hop (a remote
destination's in-edges are read by its owner, :mod:`.plan`), that adds no node: an in-edge is kept when
its source is a sampled node of the source type.

Layout: edges sorted by destination position, then by edge id (torch-sparse's order on a graph whose CSC
keeps edge order within a destination). A node listed twice (a repeated seed) gets its in-edges at each
position; as a source it is its first position (torch-sparse's ``to_local_node``).

``num_sampled_edges[et][h]`` counts the edges into the nodes first seen at hop ``h`` (they come in that
order), the last entry also those into the nodes of the last hop, so the entries sum to the number of
edges. An induced edge may join nodes several hops apart, so this is no schedule for ``trim_to_layer``
(PyG leaves the field ``None`` for induced subgraphs).
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Sequence, Tuple

import torch
from torch import Tensor

from pyg_dist._types import EdgeType, NodeType
from pyg_dist.ops import OneHop
from pyg_dist.sampler.graph import SamplingGraph
from pyg_dist.sampler.hops import HopOptions, gather_hop
from pyg_dist.sampler.messages import HopTask
from pyg_dist.sampler.output import TypedSample


def first_position(nodes: Tensor, ids: Tensor) -> Tuple[Tensor, Tensor]:
    """Which ``ids`` occur in ``nodes`` (a mask) and, for those, their first position in ``nodes``.

    Example:
        >>> found, pos = first_position(torch.tensor([7, 3, 7]), torch.tensor([3, 5, 7]))
        >>> found.tolist(), pos.tolist()
        ([True, False, True], [1, 0])
    """
    if nodes.numel() == 0 or ids.numel() == 0:
        return torch.zeros(ids.shape, dtype=torch.bool), ids.new_empty(0)
    values, order = torch.sort(nodes, stable=True)  # equal ids keep their order: the leftmost is the first
    at = torch.searchsorted(values, ids).clamp_(max=values.numel() - 1)
    found = values.index_select(0, at) == ids
    return found, order.index_select(0, at[found])


def _flatten(pieces: Sequence[Tuple[Tensor, OneHop]]) -> Tuple[Tensor, Tensor, Tensor]:
    """``(destination position, source id, edge id)`` of every answered in-edge of one task."""
    dst = [torch.repeat_interleave(pos, part.count) for pos, part in pieces]
    return torch.cat(dst), torch.cat([p.nbr for _, p in pieces]), torch.cat([p.edge for _, p in pieces])


def _by_position(inverse: Tensor, num_distinct: int, dst: Tensor, row: Tensor, edge: Tensor
                 ) -> Tuple[Tensor, Tensor, Tensor]:
    """Edges of the distinct destinations (``dst``: distinct index) laid out per destination POSITION
    (``inverse``: position -> distinct index), sorted by position then edge id: ``(row, col, edge)``."""
    order = torch.argsort(edge, stable=True)
    order = order.index_select(0, torch.argsort(dst.index_select(0, order), stable=True))
    row, edge = row.index_select(0, order), edge.index_select(0, order)
    count = torch.bincount(dst, minlength=num_distinct)
    ptr = torch.cumsum(count, 0) - count
    per_pos = count.index_select(0, inverse)
    col = torch.repeat_interleave(torch.arange(inverse.numel()), per_pos)
    starts = torch.cumsum(per_pos, 0) - per_pos
    within = torch.arange(col.numel()) - torch.repeat_interleave(starts, per_pos)
    take = ptr.index_select(0, inverse.index_select(0, col)) + within
    return row.index_select(0, take), col, edge.index_select(0, take)


def per_hop_counts(col: Tensor, num_sampled_nodes: List[int], num_hops: int) -> List[int]:
    """``num_sampled_edges`` of one induced edge type (see the module docstring); ``col`` is sorted.

    Example:
        >>> per_hop_counts(torch.tensor([0, 0, 1, 2, 3]), [1, 1, 2], 2)
        [2, 3]
    """
    if num_hops == 0:
        return []
    bounds = torch.tensor(num_sampled_nodes, dtype=torch.int64).cumsum(0)
    counts = torch.diff(torch.searchsorted(col, bounds), prepend=torch.zeros(1, dtype=torch.int64)).tolist()
    counts += [0] * (num_hops + 1 - len(counts))
    return counts[:num_hops - 1] + [sum(counts[num_hops - 1:])]


def _tasks(graph: SamplingGraph, node: Dict[NodeType, Tensor]) -> Tuple[List[HopTask], Dict[NodeType, Tensor]]:
    """Per edge type with sampled sources and destinations, a full-fanout task over its distinct
    destinations; and per destination type, position -> distinct index."""
    tasks: List[HopTask] = []
    inverse: Dict[NodeType, Tensor] = {}
    distinct: Dict[NodeType, Tensor] = {}
    for et in graph.edge_types:
        src, dst = node[et[0]], node[et[2]]
        if src.numel() == 0 or dst.numel() == 0:
            continue
        if et[2] not in distinct:
            distinct[et[2]], inverse[et[2]] = torch.unique(dst, return_inverse=True)
        tasks.append(HopTask(et, distinct[et[2]], -1))
    return tasks, inverse


async def induce(graph: SamplingGraph, opts: HopOptions, sample: TypedSample, stats=None) -> TypedSample:
    """``sample`` (non-disjoint) with its edges replaced by every edge among its nodes.

    Args:
        graph: The sampling view (a whole graph, or this process's partition: remote destinations are
            asked of their owners).
        opts: The sampler's options (its backend and timeout; no weights, times or replacement apply).
        sample: The directional sample whose nodes are kept.
        stats: A :class:`~pyg_dist.sampler.stats.SamplerStats` to count the extra round into.

    Example:
        >>> full = run_sync(induce(sampler.graph, sampler._options, sample))  # doctest: +SKIP
    """
    template = dataclasses.replace(opts.request_template(), replace=False, time_level=None, weighted=False)
    tasks, inverse = _tasks(graph, sample.node)
    pieces = await gather_hop(graph, opts, tasks, template, stats) if tasks else []
    empty = torch.empty(0, dtype=torch.int64)
    row = {et: empty for et in graph.edge_types}
    col, edge = dict(row), dict(row)
    for task, parts in zip(tasks, pieces):
        et = task.edge_type
        dst, nbr, eid = _flatten(parts)
        found, src_pos = first_position(sample.node[et[0]], nbr)
        row[et], col[et], edge[et] = _by_position(inverse[et[2]], task.seeds.numel(), dst[found], src_pos, eid[found])
    counts: Dict[EdgeType, List[int]] = {
        et: per_hop_counts(col[et], sample.num_sampled_nodes[et[2]], opts.num_hops) for et in graph.edge_types}
    return TypedSample(sample.node, row, col, edge, sample.batch, sample.num_sampled_nodes, counts)


__all__ = ["induce", "first_position", "per_hop_counts"]

