"""One partition, loaded: the typed dataclasses every reader returns and the stores build on
(homogeneous = node type ``"_N"``, edge type ``("_N", "_E", "_N")``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Union

from torch import Tensor

from pyg_dist._types import EdgeType, NodeType
from pyg_dist.format import meta as M
from pyg_dist.format.book import DensePartitionBook, PartitionBook


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
        meta: The folder's :class:`~pyg_dist.format.meta.PartitionMeta`.
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
