"""Typed messages of distributed sampling, and the typed extras a batch carries in ``metadata``.

Requests and replies travel over :mod:`pyg_dist.rpc` (dataclasses of tensors). The metadata tuples are
PyG's node / link metadata with two more fields, ``features`` (a :class:`FeatureBatch`, or ``None`` when
the sampler does not fetch features) and ``times`` (the batch's :class:`~pyg_dist.sampler.timing.StageTimes` so
far), always last: PyG's ``filter_fn`` code that reads ``metadata[0]``, ``metadata[1]``, ... keeps working, and
``metadata.features`` reaches the rows.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, NamedTuple, Optional, Tuple

from torch import Tensor

from pyg_dist._types import EdgeType, NodeType
from pyg_dist.ops import OneHop

#: Name of the callee that samples one hop for a remote partition
#: (see :func:`~pyg_dist.sampler.dist_neighbor.serve_partition`).
ONE_HOP_OP = "pyg_dist.one_hop"
#: Bytes a one-hop reply holds per sampled edge (neighbour id and edge id, int64) and per seed (its count):
#: what ``$PYG_DIST_REPLY_MAX_MB`` and ``$PYG_DIST_SERVE_BUDGET_MB`` count for one-hop replies.
SAMPLE_BYTES, SEED_BYTES = 16, 8


@dataclass(frozen=True)
class HopTask:
    """One edge type's share of a hop: sample in-neighbours of ``seeds`` (GLOBAL destination ids).

    Attributes:
        edge_type: The typed edge type (homogeneous: ``("_N", "_E", "_N")``).
        seeds: int64 global ids of destinations the receiving partition holds in-edges for.
        num_neighbors: Fanout (``-1`` = all).
        key: The random key of this hop and edge type (:mod:`pyg_dist.ops.keys`): every partition
            draws seed ``v``'s neighbours from the same stream, wherever ``v`` is sampled.
        seed_time: One timestamp per seed (temporal sampling), or ``None``.
        batch: The subgraph of each seed (disjoint sampling), or ``None``.
        skip: Draws of each seed's stream to skip (``replace`` only): this task asks for the samples
            ``skip, ..., skip + num_neighbors - 1`` of a larger sample (a piece of a split request).
    """
    edge_type: EdgeType
    seeds: Tensor
    num_neighbors: int
    key: int = 0
    seed_time: Optional[Tensor] = None
    batch: Optional[Tensor] = None
    skip: int = 0

    def subset(self, pos: Tensor) -> "HopTask":
        """The task restricted to positions ``pos`` of its seeds."""
        def pick(t: Optional[Tensor]) -> Optional[Tensor]:
            return None if t is None else t.index_select(0, pos)

        return HopTask(self.edge_type, self.seeds.index_select(0, pos), self.num_neighbors, self.key,
                       pick(self.seed_time), pick(self.batch), self.skip)

    def span(self, start: int, end: int) -> "HopTask":
        """The task restricted to its seeds ``[start, end)`` (views, no copy)."""
        def cut(t: Optional[Tensor]) -> Optional[Tensor]:
            return None if t is None else t[start:end]

        return dataclasses.replace(self, seeds=self.seeds[start:end], seed_time=cut(self.seed_time),
                                   batch=cut(self.batch))

    def draws_split(self, replace: bool, temporal_strategy: str) -> bool:
        """Whether this task's samples may be asked in pieces of draws (with replacement, strategy not
        ``'last'`` for temporal tasks, a fanout > 0): then every sample is one draw of the seed's stream."""
        return replace and self.num_neighbors > 0 and not (temporal_strategy == "last" and self.seed_time is not None)


@dataclass(frozen=True)
class OneHopRequest:
    """Everything one partition asks another to sample in one hop (all edge types at once).

    Attributes:
        partition: The partition that must answer (checked by the callee).
        tasks: One :class:`HopTask` per edge type with seeds there.
        replace: Sample with replacement.
        temporal_strategy: ``'uniform'`` or ``'last'``.
        time_level: ``'node'`` (node time of the source type), ``'edge'`` (edge time) or ``None``.
        weighted: Use the edge weights of the folder (``edge_weight``).
        timeout: The caller's call timeout: the most seconds the reply may wait for room under the owner's
            ``$PYG_DIST_SERVE_BUDGET_MB`` (``None``: the owner's call timeout).
    """
    partition: int
    tasks: Tuple[HopTask, ...]
    replace: bool = False
    temporal_strategy: str = "uniform"
    time_level: Optional[str] = None
    weighted: bool = False
    timeout: Optional[float] = None


@dataclass(frozen=True)
class OneHopReply:
    """The answer to a :class:`OneHopRequest`: one :class:`~pyg_dist.ops.OneHop` per task, in order
    (neighbours and GLOBAL edge ids grouped by seed, in seed order)."""
    partition: int
    results: Tuple[OneHop, ...]


@dataclass
class FeatureBatch:
    """The rows of one batch, aligned with the sampled node and edge lists.

    Keys are TYPED: a homogeneous graph uses node type ``"_N"`` and edge type ``("_N", "_E", "_N")``
    (:func:`pyg_dist._types.untyped` converts). ``node[t][name][i]`` belongs to ``out.node[t][i]``
    (``name`` among ``x``, ``y``, ``time``: whatever the folder has and the sampler was asked for);
    ``edge[et][name][j]`` belongs to ``out.edge[et][j]`` (``edge_attr``, ``edge_time``, ...).

    Example:
        >>> fb = out.metadata.features                 # doctest: +SKIP
        >>> x = fb.node["_N"]["x"]; y = fb.node["_N"].get("y")   # doctest: +SKIP
    """
    node: Dict[NodeType, Dict[str, Tensor]] = field(default_factory=dict)
    edge: Dict[EdgeType, Dict[str, Tensor]] = field(default_factory=dict)
    #: Node types whose rows a device cache serves (:mod:`pyg_dist.cache.device`): per type a
    #: ``DeviceRows`` (cached positions and the host rows of the others); such a type is not in ``node``.
    device: Dict[NodeType, Any] = field(default_factory=dict)

    def node_attr(self, name: str) -> Dict[NodeType, Tensor]:
        """``{node type: tensor}`` of one attribute, over the types that have it."""
        return {t: v[name] for t, v in self.node.items() if name in v}

    def edge_attr(self, name: str) -> Dict[EdgeType, Tensor]:
        """``{edge type: tensor}`` of one attribute, over the types that have it."""
        return {t: v[name] for t, v in self.edge.items() if name in v}


class DistNodeMetadata(NamedTuple):
    """``metadata`` of a node batch: PyG's ``(input_id, seed_time)`` plus ``features``, ``times``."""
    input_id: Optional[Tensor]
    seed_time: Optional[Tensor]
    features: Optional[FeatureBatch]
    times: Optional[Any] = None


class DistLinkMetadata(NamedTuple):
    """``metadata`` of a link batch (no or binary negatives): PyG's four fields plus ``features``, ``times``."""
    input_id: Optional[Tensor]
    edge_label_index: Tensor
    edge_label: Optional[Tensor]
    edge_label_time: Optional[Tensor]
    features: Optional[FeatureBatch]
    times: Optional[Any] = None


class DistTripletMetadata(NamedTuple):
    """``metadata`` of a link batch with triplet negatives: PyG's five fields plus ``features``, ``times``."""
    input_id: Optional[Tensor]
    src_index: Tensor
    dst_pos_index: Tensor
    dst_neg_index: Tensor
    seed_time: Optional[Tensor]
    features: Optional[FeatureBatch]
    times: Optional[Any] = None


def tensor_bytes(obj) -> int:
    """Bytes of the tensors inside a message (the payload size, for statistics)."""
    if isinstance(obj, Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if hasattr(obj, "__dataclass_fields__"):
        return sum(tensor_bytes(getattr(obj, k)) for k in obj.__dataclass_fields__)
    return 0


__all__ = ["ONE_HOP_OP", "SAMPLE_BYTES", "SEED_BYTES", "HopTask", "OneHopRequest", "OneHopReply", "FeatureBatch",
           "DistNodeMetadata", "DistLinkMetadata", "DistTripletMetadata", "tensor_bytes"]
