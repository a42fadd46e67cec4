"""Writes PyG's own partition layout (``torch_geometric.distributed.Partitioner``'s): ids NOT relabelled.

Used by :class:`pyg_dist.distributed.Partitioner`, the migration layer, so that scripts written for
PyG's module keep their seed ids and label files. Node ownership comes from pyg_dist's assignment
(:mod:`pyg_dist.partition.assign`); the folder is read back by :mod:`pyg_dist.format.pyg_compat`
with a dense partition book. Layout (PyG's keys; hetero ids in ``graph.pt`` / ``node_feats.pt`` are in
PyG's concatenated id space, as PyG writes them)::

    META.json                 num_parts, node_types, edge_types, node_offset, is_hetero, is_sorted
    node_map.pt | node_map/<ntype>.pt              node id -> partition
    edge_map.pt | edge_map/<src>__<rel>__<dst>.pt  edge id -> partition (its destination's)
    part_<p>/graph.pt         in-edges of the nodes p owns, sorted by destination: row, col, edge_id, size
    part_<p>/node_feats.pt    global_id (and id), feats{every node attribute}, time (all nodes, as PyG)
    part_<p>/edge_feats.pt    global_id, feats{every edge attribute}, edge_time

Unlike PyG's writer, every node attribute (``x``, ``y``, masks, ...) and every edge attribute is kept,
every file is ``fsync``'ed and the folder appears atomically (written beside ``root``, then swapped in; removed
on a failure, which is a :class:`~pyg_dist.errors.FileWriteError` naming the file). Its META.json has PyG's
keys only (a ``pyg_dist`` section would make readers take it for a pyg_dist folder), so it lists no file
digests and its folders open without the size and digest checks.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict

import torch
from torch import Tensor
from tqdm.auto import tqdm

from pyg_dist import _fsio
from pyg_dist._types import EdgeType, NodeType
from pyg_dist.format import meta as M
from pyg_dist.format.schema import EdgeEntry, GraphEntry, NodeEntry
from pyg_dist.partition.source import TypedGraph
from pyg_dist.partition.writer import finalize_output, prepare_output, removed_on_error


def _offsets(sizes: Dict, is_hetero: bool) -> Dict:
    out, acc = {}, 0
    for k, n in sizes.items():
        out[k], acc = (acc if is_hetero else 0), acc + n
    return out


def _graph_entry(g: TypedGraph, et: EdgeType, eids: Tensor, eoff: int) -> GraphEntry:
    row, col = g.edge_index[et][0, eids], g.edge_index[et][1, eids]
    order = torch.sort(col, stable=True).indices
    return GraphEntry(row=row[order], col=col[order], edge_id=eids[order] + eoff,
                      size=(g.num_nodes[et[0]], g.num_nodes[et[2]]))


def _node_entry(g: TypedGraph, t: NodeType, ids: Tensor, noff: int) -> Dict[str, object]:
    out = NodeEntry(ids + noff, {k: v[ids] for k, v in g.node_attrs[t].items()})
    if g.is_hetero:
        out.id = ids
    if t in g.node_time:
        out.time = g.node_time[t]  # PyG stores the time of every node in every partition
    return out.to_dict()


def _edge_entry(g: TypedGraph, et: EdgeType, eids: Tensor) -> Dict[str, object]:
    out = EdgeEntry(eids, {k: v[eids] for k, v in g.edge_attrs[et].items()})
    if et in g.edge_time:
        out.edge_time = g.edge_time[et][eids]
    return out.to_dict()


def _write_part(tmp: Path, g: TypedGraph, owners: Dict[NodeType, Tensor], edge_owner: Dict[EdgeType, Tensor],
                p: int, noff: Dict, eoff: Dict) -> None:
    graph: Dict[EdgeType, GraphEntry] = {}
    nodes: Dict[NodeType, Dict[str, object]] = {}
    edges: Dict[EdgeType, Dict[str, object]] = {}
    for et in g.edge_types:
        eids = (edge_owner[et] == p).nonzero().view(-1)
        graph[et] = _graph_entry(g, et, eids, eoff[et])
        edges[et] = _edge_entry(g, et, graph[et].edge_id - eoff[et])
    for t in g.node_types:
        nodes[t] = _node_entry(g, t, (owners[t] == p).nonzero().view(-1), noff[t])
    saved = {et: e.to_dict() for et, e in graph.items()}
    for path, entries in ((M.graph_path(tmp, p), saved), (M.node_feats_path(tmp, p), nodes),
                          (M.edge_feats_path(tmp, p), edges)):
        # PyG's homogeneous files are the single type's entry itself
        _fsio.save(entries if g.is_hetero else next(iter(entries.values())), path)


def write_pyg_layout(g: TypedGraph, owners: Dict[NodeType, Tensor], root, num_parts: int,
                     overwrite: bool = False, progress: bool = True) -> None:
    """Writes ``g`` into ``root`` in PyG's partition layout, node ``v`` of type ``t`` going to partition
    ``owners[t][v]`` and every edge to its destination's partition (ids kept as they are).

    Args:
        g: The graph (:func:`pyg_dist.partition.source.typed_graph`), features already in the dtype to store
            (:func:`pyg_dist.partition.source.with_feature_dtype`).
        owners: Per node type, the ``[num_nodes]`` partition of every node.
        root: The folder to create (see :func:`pyg_dist.partition.writer.check_output` for ``overwrite``).
        num_parts: Number of partitions.
        overwrite: Replace a non-empty ``root``.
        progress: Show a progress bar over the partitions.
    """
    tmp = prepare_output(root, overwrite)
    with removed_on_error(tmp):
        noff, eoff = _offsets(g.num_nodes, g.is_hetero), _offsets({e: g.num_edges(e) for e in g.edge_types},
                                                                   g.is_hetero)
        edge_owner = {et: owners[et[2]][g.edge_index[et][1]] for et in g.edge_types}
        for p in tqdm(range(num_parts), desc="write partitions", disable=not progress):
            _write_part(tmp, g, owners, edge_owner, p, noff, eoff)
        for t in g.node_types:
            _fsio.save(owners[t], M.node_map_path(tmp, t, g.is_hetero))
        for et in g.edge_types:
            _fsio.save(edge_owner[et], M.edge_map_path(tmp, et, g.is_hetero))
        meta = {"num_parts": num_parts, "node_types": g.node_types if g.is_hetero else None,
                "edge_types": [list(e) for e in g.edge_types] if g.is_hetero else None,
                "node_offset": list(noff.values()) if g.is_hetero else None, "is_hetero": g.is_hetero,
                "is_sorted": True}
        _fsio.write_text(M.meta_path(tmp), json.dumps(meta))
        finalize_output(tmp, root)


__all__ = ["write_pyg_layout"]
