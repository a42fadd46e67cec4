"""The typed result of node-level sampling and its conversion to PyG's sampler outputs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from torch import Tensor
from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput

from pyg_dist._types import HOMO_EDGE, HOMO_NODE, EdgeType, NodeType


@dataclass
class TypedSample:
    """A sampled subgraph on typed dicts (a homogeneous graph uses ``"_N"`` / ``("_N", "_E", "_N")``).

    Attributes:
        node: Global node ids per type; seeds first, then new nodes in first-seen order.
        row: Local index (into ``node[src]``) of each sampled edge's source / neighbour.
        col: Local index (into ``node[dst]``) of each sampled edge's destination / seed side.
        edge: Global edge id of each sampled edge (ids of the input graph, not CSC positions).
        batch: Per node, the index of the seed whose subgraph it belongs to (disjoint only).
        num_sampled_nodes: Per type, nodes added per hop (entry 0 = seeds); length ``num_hops + 1``.
        num_sampled_edges: Per edge type, edges sampled per hop; length ``num_hops``. For induced subgraphs,
            edges into the nodes first seen at each hop (the last entry also counts edges into the last hop's
            nodes): :mod:`pyg_dist.sampler.induced`.
    """

    node: Dict[NodeType, Tensor]
    row: Dict[EdgeType, Tensor]
    col: Dict[EdgeType, Tensor]
    edge: Dict[EdgeType, Tensor]
    batch: Optional[Dict[NodeType, Tensor]]
    num_sampled_nodes: Dict[NodeType, List[int]]
    num_sampled_edges: Dict[EdgeType, List[int]]

    @property
    def total_edges(self) -> int:
        """Number of sampled edges over all hops and edge types."""
        return sum(v.numel() for v in self.row.values())


def to_sampler_output(sample: TypedSample, is_hetero: bool, metadata: Any = None):
    """Converts a :class:`TypedSample` to PyG's ``SamplerOutput`` (homo) / ``HeteroSamplerOutput``.

    Example:
        >>> out = to_sampler_output(sample, is_hetero=False, metadata=(input_id, None))  # doctest: +SKIP
        >>> out.node, out.row, out.col  # doctest: +SKIP
    """
    if is_hetero:
        return HeteroSamplerOutput(
            node=dict(sample.node), row=dict(sample.row), col=dict(sample.col), edge=dict(sample.edge),
            batch=None if sample.batch is None else dict(sample.batch),
            num_sampled_nodes=dict(sample.num_sampled_nodes),
            num_sampled_edges=dict(sample.num_sampled_edges), metadata=metadata)
    return SamplerOutput(
        node=sample.node[HOMO_NODE], row=sample.row[HOMO_EDGE], col=sample.col[HOMO_EDGE],
        edge=sample.edge[HOMO_EDGE], batch=None if sample.batch is None else sample.batch[HOMO_NODE],
        num_sampled_nodes=sample.num_sampled_nodes[HOMO_NODE],
        num_sampled_edges=sample.num_sampled_edges[HOMO_EDGE], metadata=metadata)
