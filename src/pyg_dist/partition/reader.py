"""Loads one partition of a folder written by pyg_dist (range book) or by PyG (dense book).

Everything is returned as typed dicts (homogeneous = node type ``"_N"``, edge type
``("_N", "_E", "_N")``) of dataclasses, the contract the stores build on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Union

import torch
from torch import Tensor

from pyg_dist._types import HOMO_EDGE, HOMO_NODE, EdgeType, NodeType, as_typed
from pyg_dist.errors import InvalidArgumentError, PartitionFormatError
from pyg_dist.partition import meta as M
from pyg_dist.partition.book import AnyType, DensePartitionBook, PartitionBook
from pyg_dist.partition.source import WEIGHT


@dataclass
class GraphPart:
    """In-edges of the destinations a partition samples for, in CSC order.

    Attributes:
        colptr: ``[dst_end - dst_start + 1]``; the in-edges of destination ``v`` are positions
            ``colptr[v - dst_start]:colptr[v - dst_start + 1]``.
        row: Global source id of each edge (sorted by destination).
        edge_id: Global edge id of each edge.
        dst_start / dst_end: Destination id range covered: the owned range, or all nodes in hybrid
            folders and PyG-written folders.
        weight / edge_time: Optional per-edge ``edge_weight`` and ``edge_time`` aligned with ``row``.
            In pyg_dist folders the in-edges of one destination are sorted by ``edge_time`` when the
            type has one (META ``within_dst_order``), else kept in input order.
        num_src / num_dst: Node counts of the source and destination types.
    """
    colptr: Tensor
    row: Tensor
    edge_id: Tensor
    dst_start: int
    dst_end: int
    num_src: int
    num_dst: int
    weight: Optional[Tensor] = None
    edge_time: Optional[Tensor] = None


@dataclass
class NodeFeats:
    """Attributes of the owned nodes of one type; row ``i`` belongs to ``global_id[i]`` (ascending).

    ``feats`` holds ``x``, ``y``, the masks and every other node attribute; ``time`` the node time.
    """
    global_id: Tensor
    feats: Dict[str, Tensor] = field(default_factory=dict)
    time: Optional[Tensor] = None


@dataclass
class EdgeFeats:
    """Attributes of the owned edges of one type; row ``i`` belongs to edge ``global_id[i]``."""
    global_id: Tensor
    feats: Dict[str, Tensor] = field(default_factory=dict)
    edge_time: Optional[Tensor] = None


@dataclass
class PartitionData:
    """One partition, loaded.

    Attributes:
        meta: The folder's :class:`~pyg_dist.partition.meta.PartitionMeta`.
        part: The partition index.
        book: :class:`PartitionBook` (pyg_dist folders) or :class:`DensePartitionBook` (PyG folders).
        graph / node_feats / edge_feats: Per edge type / node type / edge type.
        full_node_time: Per node type with node time, the time of *every* node (index = global id);
            samplers need it to filter halo neighbours.
    """
    meta: M.PartitionMeta
    part: int
    book: Union[PartitionBook, DensePartitionBook]
    graph: Dict[EdgeType, GraphPart]
    node_feats: Dict[NodeType, NodeFeats]
    edge_feats: Dict[EdgeType, EdgeFeats]
    full_node_time: Dict[NodeType, Tensor] = field(default_factory=dict)


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
    from pyg_dist.partition.pyg_compat import pyg_partition
    return pyg_partition(meta, part, book, graph_raw, nodes_raw, edges_raw)


def _native(meta, part, book, graph_raw, nodes_raw, edges_raw, mmap) -> PartitionData:
    edge_feats = {e: EdgeFeats(v["global_id"], dict(v.get("feats", {})), v.get("edge_time"))
                  for e, v in edges_raw.items()}
    graph = {}
    for e in meta.edge_types:
        raw = graph_raw.get(e)
        if raw is None:
            raise PartitionFormatError(M.graph_path(meta.root, part), f"no entry for edge type {e!r}")
        ef = edge_feats.get(e)
        weight, etime = raw.get("weight"), raw.get("edge_time")
        if not meta.hybrid and ef is not None:  # same order as the graph's edges
            weight, etime = ef.feats.get(WEIGHT), ef.edge_time
        graph[e] = GraphPart(colptr=raw["colptr"], row=raw["row"], edge_id=raw["edge_id"],
                             dst_start=int(raw["dst_start"]), dst_end=int(raw["dst_end"]),
                             num_src=meta.num_nodes[e[0]], num_dst=meta.num_nodes[e[2]],
                             weight=weight, edge_time=etime)
    node_feats = {t: NodeFeats(v["global_id"], dict(v.get("feats", {})), v.get("time"))
                  for t, v in nodes_raw.items()}
    full_time = {t: M.load_tensor(M.full_node_time_path(meta.root, t), mmap) for t in meta.node_time_types}
    return PartitionData(meta, part, book, graph, node_feats, edge_feats, full_time)


def load_original_ids(root) -> Dict[Union[NodeType, EdgeType], Tensor]:
    """Original id of every global id, per node type and per edge type (``out[type][global] = original``).

    For a PyG-written folder ids were never relabelled, so the identity is returned.

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
    out = {t: M.load_tensor(M.original_node_ids_path(root, t)) for t in meta.node_types}
    out.update({e: M.load_tensor(M.original_edge_ids_path(root, e)) for e in meta.edge_types})
    return out
