"""Loads one partition of a folder written by pyg_dist (range book) or by PyG (dense book).

Everything is returned as typed dicts (homogeneous = node type ``"_N"``, edge type
``("_N", "_E", "_N")``) of dataclasses, the contract the stores build on.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Union

import torch
from torch import Tensor

from pyg_dist._types import HOMO_EDGE, HOMO_NODE, EdgeType, NodeType, as_typed
from pyg_dist.errors import InvalidArgumentError, PartitionFormatError
from pyg_dist.format import meta as M
from pyg_dist.format.book import AnyType, DensePartitionBook, PartitionBook
from pyg_dist.format.data import EdgeFeats, GraphPart, NodeFeats, PartitionData
from pyg_dist.format.schema import WEIGHT, EdgeEntry, GraphEntry, NodeEntry


def load_book(meta: M.PartitionMeta) -> Union[PartitionBook, DensePartitionBook]:
    """The partition book of a folder: a range table, or a dense map for PyG-written folders."""
    if meta.is_native:
        bounds: Dict[AnyType, Tensor] = dict(meta.node_bounds.items())
        bounds.update(meta.edge_bounds.items())
        return PartitionBook(bounds)
    maps: Dict[AnyType, Tensor] = {t: M.load_tensor(M.node_map_path(meta.root, t, meta.is_hetero))
                                   for t in meta.node_types}
    maps.update({e: M.load_tensor(M.edge_map_path(meta.root, e, meta.is_hetero)) for e in meta.edge_types})
    return DensePartitionBook(maps, meta.num_parts)


def load_partition(root, part: int, mmap: bool = False) -> PartitionData:
    """Loads partition ``part`` of the folder ``root``.

    Args:
        root: A folder written by :class:`~pyg_dist.partition.Partitioner` or by PyG's ``Partitioner``.
        part: Partition index in ``[0, num_parts)``.
        mmap: Memory-map the tensors (``torch.load(mmap=True)``) so processes share pages.

    Raises:
        PartitionFormatError: naming the file that is missing or corrupt.
        InvalidArgumentError: ``part`` out of range.

    Example:
        >>> pd = load_partition("/tmp/cora-2", 0)  # doctest: +SKIP
        >>> g = pd.graph[("_N", "_E", "_N")]; g.row[g.colptr[0]:g.colptr[1]]  # doctest: +SKIP
    """
    meta = M.read_meta(root)
    if not isinstance(part, int) or isinstance(part, bool) or not 0 <= part < meta.num_parts:
        raise InvalidArgumentError("load_partition", "part", part, f"an int in [0, {meta.num_parts})")
    book = load_book(meta)
    h = meta.is_hetero
    graph_raw = as_typed(M.load_tensor(M.graph_path(root, part), mmap), HOMO_EDGE, h)
    nodes_raw = as_typed(M.load_tensor(M.node_feats_path(root, part), mmap), HOMO_NODE, h)
    efile = M.edge_feats_path(root, part)
    edges_raw = as_typed(M.load_tensor(efile, mmap), HOMO_EDGE, h) if efile.is_file() else {}
    edges_raw = {tuple(k): v for k, v in edges_raw.items() if v}
    if meta.is_native:
        return _native(meta, part, book, graph_raw, nodes_raw, edges_raw, mmap)
    from pyg_dist.format.pyg_compat import pyg_partition
    return pyg_partition(meta, part, book, graph_raw, nodes_raw, edges_raw)


def _native(meta, part, book, graph_raw, nodes_raw, edges_raw, mmap) -> PartitionData:
    epath, gpath, npath = (M.edge_feats_path(meta.root, part), M.graph_path(meta.root, part),
                           M.node_feats_path(meta.root, part))
    edge_feats = {}
    for e, v in edges_raw.items():
        entry = EdgeEntry.from_dict(v, epath, e)
        if entry.global_id is None:
            raise PartitionFormatError(epath, f"entry {e!r}: missing key 'global_id'")
        edge_feats[e] = EdgeFeats(entry.global_id, dict(entry.feats), entry.edge_time)
    graph = {}
    for e in meta.edge_types:
        if e not in graph_raw:
            raise PartitionFormatError(gpath, f"no entry for edge type {e!r}")
        g = GraphEntry.from_dict(graph_raw[e], gpath, e)
        if g.colptr is None or g.dst_start is None or g.dst_end is None:
            raise PartitionFormatError(gpath, f"entry {e!r}: a pyg_dist folder needs colptr, dst_start, dst_end")
        ef = edge_feats.get(e)
        weight, etime = g.weight, g.edge_time
        if not meta.hybrid and ef is not None:  # same order as the graph's edges
            weight, etime = ef.feats.get(WEIGHT), ef.edge_time
        graph[e] = GraphPart(colptr=g.colptr, row=g.row, edge_id=g.edge_id, dst_start=int(g.dst_start),
                             dst_end=int(g.dst_end), num_src=meta.num_nodes[e[0]], num_dst=meta.num_nodes[e[2]],
                             weight=weight, edge_time=etime)
    node_feats = {}
    for t, v in nodes_raw.items():
        n = NodeEntry.from_dict(v, npath, t)
        node_feats[t] = NodeFeats(n.global_id, dict(n.feats), n.time)
    full_time = {t: M.load_tensor(M.full_node_time_path(meta.root, t), mmap) for t in meta.node_time_types}
    return PartitionData(meta, part, book, graph, node_feats, edge_feats, full_time)


def load_original_ids(root) -> Dict[Union[NodeType, EdgeType], Tensor]:
    """Original id of every global id, per node type and per edge type (``out[type][global] = original``).

    For a PyG-written folder ids were never relabelled, so the identity is returned. The files are checked
    against META.json's digests once per machine first (:mod:`pyg_dist.format.verified`).

    Raises:
        PartitionFormatError: an original-id file's content differs from its digest (names the file).

    Example:
        >>> orig = load_original_ids("/tmp/cora-2")  # doctest: +SKIP
        >>> pred_in_original_order = torch.empty_like(pred); pred_in_original_order[orig["_N"]] = pred  # doctest: +SKIP
    """
    meta = M.read_meta(root)
    out: Dict[AnyType, Tensor]
    if not meta.is_native:
        out = {t: torch.arange(n) for t, n in meta.num_nodes.items()}
        out.update({e: torch.arange(n) for e, n in meta.num_edges.items()})
        return out
    from pyg_dist.format.verified import check_files_once
    rels: Dict[AnyType, str] = {t: M.original_node_ids_path("", t).as_posix() for t in meta.node_types}
    rels.update({e: M.original_edge_ids_path("", e).as_posix() for e in meta.edge_types})
    check_files_once(meta, list(rels.values()))
    return {k: M.load_tensor(Path(root) / rel) for k, rel in rels.items()}
