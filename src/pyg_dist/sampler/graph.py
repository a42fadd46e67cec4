"""The sampling view of a graph: what the hop loop reads, for one partition or a whole in-memory graph.

A whole in-memory graph is one partition of one (:meth:`SamplingGraph.in_memory`); a partition folder
gives each process the view of its own partition (:meth:`SamplingGraph.from_store`). Either way, per
edge type a CSC over a contiguous destination range, GLOBAL ids throughout, the partition book deciding
who samples which destination, and the full node time per type for temporal sampling.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_dist._types import EdgeType, NodeType
from pyg_dist.ops import CSC

if TYPE_CHECKING:
    from pyg_dist.format.book import DensePartitionBook, PartitionBook


@dataclass(frozen=True)
class SamplingGraph:
    """What sampling reads (GLOBAL ids throughout).

    Attributes:
        partition: This partition (0 for an in-memory graph).
        node_types / edge_types: Typed, in the graph's order.
        num_nodes: Nodes per type in the whole graph.
        csc: Per edge type, the in-edges of the destinations in ``dst_range[et]`` (weights and edge time
            included when the graph has them).
        dst_range: Per edge type, ``(start, end)`` of the destinations the CSC is indexed by
            (``csc`` row ``v - start`` holds destination ``v``).
        local_range: Per edge type, the destinations whose in-edges the CSC holds entirely: the owned
            range, or every node (in-memory graphs, hybrid folders); ``None`` in folders written by PyG
            (``dst_range`` spans all nodes but only owned ones have edges: the book decides).
        node_time: Per node type with node time, the time of every node (index = global id).
        book: The partition book.
        topo: Per edge type, cached in-edges of some remote destinations: a CSC indexed by global
            destination id and the mask of those ids (sampled here instead of by their owner).
    """
    partition: int
    node_types: List[NodeType]
    edge_types: List[EdgeType]
    num_nodes: Dict[NodeType, int]
    csc: Dict[EdgeType, CSC]
    dst_range: Dict[EdgeType, Tuple[int, int]]
    local_range: Dict[EdgeType, Optional[Tuple[int, int]]]
    node_time: Dict[NodeType, Tensor]
    book: Union[PartitionBook, DensePartitionBook]
    topo: Dict[EdgeType, Tuple[CSC, Tensor]] = dataclasses.field(default_factory=dict)

    @staticmethod
    def in_memory(node_types: List[NodeType], edge_types: List[EdgeType], num_nodes: Dict[NodeType, int],
                  csc: Dict[EdgeType, CSC], node_time: Optional[Dict[NodeType, Tensor]] = None) -> "SamplingGraph":
        """A whole graph held by this process: one partition owning every id."""
        from pyg_dist.format.book import PartitionBook
        book = PartitionBook({t: torch.tensor([0, n]) for t, n in num_nodes.items()})
        full = {et: (0, num_nodes[et[2]]) for et in edge_types}
        return SamplingGraph(0, list(node_types), list(edge_types), dict(num_nodes), dict(csc), full, dict(full),
                             dict(node_time or {}), book)

    @staticmethod
    def from_store(graph_store) -> "SamplingGraph":
        """The view of a :class:`~pyg_dist.store.LocalGraphStore` (typed keys, no copies)."""
        meta = graph_store.partition_meta
        ets, nts = list(meta.edge_types), list(meta.node_types)
        pub_e = (lambda et: et) if meta.is_hetero else (lambda et: None)
        pub_n = (lambda t: t) if meta.is_hetero else (lambda t: None)
        node_time = {t: graph_store.node_time(pub_n(t)) for t in nts}
        dst_range = {et: graph_store.dst_range(pub_e(et)) for et in ets}
        by_range = meta.is_native or meta.hybrid
        return SamplingGraph(graph_store.partition, nts, ets, dict(meta.num_nodes),
                             {et: graph_store.local_csc(pub_e(et)) for et in ets}, dst_range,
                             {et: dst_range[et] if by_range else None for et in ets},
                             {t: v for t, v in node_time.items() if v is not None}, graph_store.book,
                             dict(graph_store.topology_cache()))

    @property
    def is_whole(self) -> bool:
        """Whether this process holds every in-edge (one partition): sampling never routes."""
        return self.book.num_parts == 1

    def sampling_csc(self, et: EdgeType, weighted: bool, time_level: Optional[str]) -> CSC:
        """The CSC with only the per-edge fields this sampling uses (the kernel reads what it gets)."""
        csc = self.csc[et]
        keep_w, keep_t = weighted and csc.weight is not None, time_level == "edge"
        if (csc.weight is not None) == keep_w and (csc.edge_time is not None) == keep_t:
            return csc
        return dataclasses.replace(csc, weight=csc.weight if keep_w else None,
                                   edge_time=csc.edge_time if keep_t else None)

    def holds(self, et: EdgeType, ids: Tensor) -> bool:
        """Whether this partition holds every in-edge of the destinations ``ids`` of ``et``."""
        if et not in self.csc:
            return False
        if not ids.numel():
            return True
        rng = self.local_range[et]
        if rng is None:
            return bool((self.book.owner(et[2], ids) == self.partition).all())
        return rng[0] <= int(ids.min()) and int(ids.max()) < rng[1]

    def is_temporal_type(self, et: EdgeType, time_level: Optional[str]) -> bool:
        """Whether sampling ``et`` compares times (edge time of ``et``, or node time of its source)."""
        if time_level == "edge":
            return self.csc[et].edge_time is not None
        return time_level == "node" and et[0] in self.node_time


__all__ = ["SamplingGraph"]
