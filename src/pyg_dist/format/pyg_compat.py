"""Reading folders written by PyG's own ``Partitioner`` (``torch_geometric.distributed.Partitioner``).

Differences from pyg_dist folders, all absorbed here: ids are not contiguous (a dense book is used);
``node_feats`` rows are in METIS order (re-sorted here by global id, so row = ``book.to_local``);
``time`` holds the time of *all* nodes; in hetero folders ``graph.pt`` edge ids and ``node_feats``
``global_id`` are in the homogeneous id space (offsets removed here); ``edge_time`` may come without a
``global_id`` (it is then aligned with the graph's edges); graph CSC covers all destination nodes.
"""
from __future__ import annotations

from typing import Dict, Optional

import torch
from torch import Tensor

from pyg_dist.errors import PartitionFormatError
from pyg_dist.format import meta as M
from pyg_dist.format.book import DensePartitionBook
from pyg_dist.format.data import EdgeFeats, GraphPart, NodeFeats, PartitionData
from pyg_dist.format.schema import EdgeEntry, GraphEntry, NodeEntry


def _edge_offsets(meta: M.PartitionMeta) -> Dict[tuple, int]:
    out, acc = {}, 0
    for e in meta.edge_types:
        out[e], acc = (acc if meta.is_hetero else 0), acc + meta.num_edges[e]
    return out


def _node_offset(meta: M.PartitionMeta, t) -> int:
    offsets = meta.extra.get("node_offset")
    return int(offsets[meta.node_types.index(t)]) if meta.is_hetero and offsets else 0


def _graph(meta, part, raw, e, eoff) -> GraphPart:
    path = M.graph_path(meta.root, part)
    entry = GraphEntry.from_dict(raw, path, e)
    row, col, eid = entry.row.long(), entry.col.long(), entry.edge_id.long() - eoff
    if eid.numel() and (int(eid.min()) < 0 or int(eid.max()) >= meta.num_edges[e]):
        raise PartitionFormatError(path, f"edge ids of {e!r} fall outside [0, {meta.num_edges[e]})")
    if not meta.extra.get("is_sorted", False) or (col.numel() > 1 and bool((col[1:] < col[:-1]).any())):
        order = torch.sort(col, stable=True).indices
        row, col, eid = row[order], col[order], eid[order]
    n_dst = meta.num_nodes[e[2]]
    colptr = torch.searchsorted(col, torch.arange(n_dst + 1))
    return GraphPart(colptr=colptr, row=row, edge_id=eid, dst_start=0, dst_end=n_dst,
                     num_src=meta.num_nodes[e[0]], num_dst=n_dst)


def _nodes(meta, part, raw, t):
    entry = NodeEntry.from_dict(raw, M.node_feats_path(meta.root, part), t)
    gid = entry.id if entry.id is not None else entry.global_id - _node_offset(meta, t)
    gid = gid.long()
    order = torch.sort(gid).indices
    feats = {k: v[order] for k, v in entry.feats.items() if v is not None}
    time: Optional[Tensor] = entry.time
    full = None
    if time is not None and time.numel() == meta.num_nodes[t]:
        full, time = time, time[gid[order]]
    elif time is not None:
        time = time[order]
    return NodeFeats(gid[order], feats, time), full


def _edges(meta, part, raw, e, g: GraphPart, book: DensePartitionBook) -> EdgeFeats:
    entry = EdgeEntry.from_dict(raw, M.edge_feats_path(meta.root, part), e)
    gid = entry.global_id
    if gid is None:  # PyG saves edge_time alone, aligned with graph.pt's edges
        gid = g.edge_id
    gid = gid.long()
    if gid.numel() and bool((book.owner(e, gid) != part).any()):
        raise PartitionFormatError(M.edge_feats_path(meta.root, part),
                                   f"edge features of {e!r} include edges that edge_map puts elsewhere")
    order = torch.sort(gid).indices
    feats = {k: v[order] for k, v in entry.feats.items() if v is not None}
    etime = entry.edge_time
    return EdgeFeats(gid[order], feats, etime[order] if etime is not None else None)


def pyg_partition(meta, part, book, graph_raw, nodes_raw, edges_raw) -> PartitionData:
    """Builds :class:`PartitionData` from the raw dicts of a PyG-written partition."""
    eoff = _edge_offsets(meta)
    graph = {}
    for e in meta.edge_types:
        raw = graph_raw.get(e)
        if raw is None:
            raise PartitionFormatError(M.graph_path(meta.root, part), f"no entry for edge type {e!r}")
        graph[e] = _graph(meta, part, raw, e, eoff[e])
    node_feats, full_time = {}, {}
    for t, raw in nodes_raw.items():
        node_feats[t], full = _nodes(meta, part, raw, t)
        if full is not None:
            full_time[t] = full
    edge_feats = {}
    for e, raw in edges_raw.items():
        ef = edge_feats[e] = _edges(meta, part, raw, e, graph[e], book)
        if ef.edge_time is not None:
            owned = graph[e].edge_id
            graph[e].edge_time = ef.edge_time[book.to_local(e, owned)] if owned.numel() else ef.edge_time
    return PartitionData(meta, part, book, graph, node_feats, edge_feats, full_time)
