"""The partitioner's view of an input graph: typed dicts of tensors, validated once.

:func:`typed_graph` is the boundary converter: it turns a ``Data`` (one node type ``"_N"``, one edge type
``("_N", "_E", "_N")``) or a ``HeteroData`` into a :class:`TypedGraph`, so everything after it runs one
code path.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import torch
from torch import Tensor

from pyg_dist._types import HOMO_EDGE, HOMO_NODE, EdgeType, NodeType
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.format.precision import cast_features
from pyg_dist.format.schema import EDGE_TIME, NODE_TIME

_WHERE = "Partitioner"
_SKIP = {"num_nodes", "edge_index"}
LOG = logging.getLogger("pyg_dist")


class NodeShape:
    """Node types and counts (``num_nodes``) and the concatenated id space over them, shared by
    :class:`TypedGraph` and :class:`~pyg_dist.partition.ooc.chunked.ChunkedGraph`."""
    num_nodes: Dict[NodeType, int]

    @property
    def node_types(self) -> List[NodeType]:
        return list(self.num_nodes)

    def offsets(self) -> Dict[NodeType, int]:
        """Start of each node type in the concatenated (homogeneous) id space."""
        out, acc = {}, 0
        for t, n in self.num_nodes.items():
            out[t], acc = acc, acc + n
        return out

    def total_nodes(self) -> int:
        """Number of nodes over all types."""
        return sum(self.num_nodes.values())


@dataclass
class TypedGraph(NodeShape):
    """A graph as typed dicts (homogeneous graphs use :data:`HOMO_NODE` / :data:`HOMO_EDGE`).

    Attributes:
        is_hetero: Whether the input was a ``HeteroData``.
        num_nodes: Nodes per node type.
        edge_index: ``[2, E]`` int64 per edge type, per-type node ids (source row 0, destination row 1).
        node_attrs: Per node type, every per-node attribute except ``time`` (x, y, masks, ...).
        node_time: Per node type that has one, the int64 ``time`` attribute.
        edge_attrs: Per edge type, every per-edge attribute except ``edge_index`` and ``edge_time``.
        edge_time: Per edge type that has one, the ``edge_time`` attribute.
        graph_attrs: JSON-serialisable graph-level scalars (kept in META).
    """
    is_hetero: bool
    num_nodes: Dict[NodeType, int]
    edge_index: Dict[EdgeType, Tensor]
    node_attrs: Dict[NodeType, Dict[str, Tensor]] = field(default_factory=dict)
    node_time: Dict[NodeType, Tensor] = field(default_factory=dict)
    edge_attrs: Dict[EdgeType, Dict[str, Tensor]] = field(default_factory=dict)
    edge_time: Dict[EdgeType, Tensor] = field(default_factory=dict)
    graph_attrs: Dict[str, Any] = field(default_factory=dict)

    @property
    def edge_types(self) -> List[EdgeType]:
        return list(self.edge_index)

    def num_edges(self, edge_type: EdgeType) -> int:
        """Number of edges of ``edge_type``."""
        return int(self.edge_index[edge_type].size(1))


def _stores(data):
    """(node stores, edge stores) as typed lists; the only homo/hetero branch of the partitioner."""
    from torch_geometric.data import Data, HeteroData
    if isinstance(data, HeteroData):
        return ([(t, data[t]) for t in data.node_types], [(t, data[t]) for t in data.edge_types], True)
    if isinstance(data, Data):
        return [(HOMO_NODE, data)], [(HOMO_EDGE, data)], False
    raise InvalidArgumentError(_WHERE, "data", type(data).__name__, "a torch_geometric Data or HeteroData")


def _check_name(name: str, what: str) -> None:
    if not isinstance(name, str) or not name or "/" in name or name.startswith(".") or "__" in name:
        raise InvalidArgumentError(_WHERE, what, name,
                                   "a non-empty name without '/', '__' or a leading '.' (used in file names)")


def typed_graph(data) -> TypedGraph:
    """Converts a ``Data`` / ``HeteroData`` into a validated :class:`TypedGraph`.

    Raises:
        InvalidArgumentError: on a missing or malformed ``edge_index``, ids out of range, a mask or
            attribute whose length matches neither the nodes nor the edges, or a non-tensor attribute
            that cannot be stored in META.
    """
    node_stores, edge_stores, is_hetero = _stores(data)
    g = TypedGraph(is_hetero=is_hetero, num_nodes={}, edge_index={})
    for ntype, store in node_stores:
        if is_hetero:
            _check_name(ntype, "node type")
        n = store.num_nodes
        if n is None or n < 0:
            raise InvalidArgumentError(_WHERE, f"data[{ntype!r}].num_nodes", n, "a known number of nodes")
        g.num_nodes[ntype] = int(n)
    for etype, store in edge_stores:
        if is_hetero:
            for part in etype:
                _check_name(part, "edge type")
        g.edge_index[etype] = _check_edge_index(etype, store, g.num_nodes)
    for ntype, store in node_stores:
        _collect_node_attrs(g, ntype, store, is_hetero)
    for etype, store in edge_stores:
        _collect_edge_attrs(g, etype, store, is_hetero)
    _collect_graph_attrs(g, data, is_hetero)
    return g


def check_finite(g: TypedGraph, allow: bool) -> List[str]:
    """Finds NaN / inf in floating node and edge attributes; raises unless ``allow`` (then reports them).

    Returns:
        One line per attribute with non-finite values (empty when all are finite).

    Raises:
        InvalidArgumentError: naming the first such attribute, its count and a few rows, unless ``allow``.
    """
    found = []
    for group, attrs in list(g.node_attrs.items()) + list(g.edge_attrs.items()):
        for key, value in attrs.items():
            line = nonfinite_rows(_WHERE, f"data[{group!r}].{key}", value, allow)
            if line is not None:
                found.append(line)
    return found


def with_feature_dtype(g: TypedGraph, feature_dtype: Optional[torch.dtype]) -> TypedGraph:
    """``g`` with its features (:mod:`pyg_dist.format.precision`) in ``feature_dtype``: the one cast of the
    in-memory partitioner, so every file it writes (parts, caches) holds the stored dtype. ``None``, or features
    already in that dtype: ``g``'s tensors, not copied.

    Raises:
        InvalidArgumentError: naming ``feature_dtype``, when a feature's finite value overflows it.
    """
    if feature_dtype is None:
        return g
    cast = lambda group, attrs: cast_features(attrs, feature_dtype, _WHERE, "feature_dtype",  # noqa: E731
                                              f"data[{group!r}]")
    return dataclasses.replace(g, node_attrs={t: cast(t, a) for t, a in g.node_attrs.items()},
                               edge_attrs={e: cast(e, a) for e, a in g.edge_attrs.items()})


def nonfinite_rows(where: str, name: str, value: Tensor, allow: bool, scope: str = "") -> Optional[str]:
    """The one NaN / inf check of both partitioners: ``None`` when the floating ``value`` (rows in dim 0) is
    finite, else a report line (``"<name>: N rows with NaN/inf<scope> (e.g. rows [...])"``), or, unless
    ``allow``, an :class:`InvalidArgumentError` from ``where`` naming ``name`` with that line."""
    bad = nonfinite_mask(value)
    return None if bad is None else nonfinite_line(where, name, int(bad.sum()), bad.nonzero().view(-1)[:5].tolist(),
                                                    allow, scope)


def nonfinite_mask(value: Tensor) -> Optional[Tensor]:
    """Per row of ``value``: whether it holds a NaN or inf (``None``: not floating, or every row finite)."""
    if not value.is_floating_point() or not value.numel():
        return None
    bad = ~torch.isfinite(value.reshape(value.size(0), -1)).all(1)
    return bad if bool(bad.any()) else None


def nonfinite_line(where: str, name: str, count: int, first: list, allow: bool, scope: str = "") -> str:
    """:func:`nonfinite_rows`'s line for ``count`` rows, ``first`` of them listed; raises unless ``allow``."""
    line = f"{name}: {count} rows with NaN/inf{scope} (e.g. rows {first[:5]})"
    if not allow:
        raise InvalidArgumentError(where, name, line, "finite values (or allow_nonfinite=True / --allow-nonfinite "
                                   "to keep them)")
    return line


def _check_edge_index(etype: EdgeType, store, num_nodes: Dict[NodeType, int]) -> Tensor:
    name = f"data[{etype!r}].edge_index" if etype != HOMO_EDGE else "data.edge_index"
    ei = store.get("edge_index") if hasattr(store, "get") else getattr(store, "edge_index", None)
    if ei is None:
        ei = torch.empty(2, 0, dtype=torch.long)
    if not isinstance(ei, Tensor) or ei.dim() != 2 or ei.size(0) != 2 or ei.is_floating_point():
        raise InvalidArgumentError(_WHERE, name, getattr(ei, "shape", type(ei).__name__),
                                   "an integer tensor of shape [2, num_edges] (sparse layouts unsupported)")
    ei = ei.long()
    for row, t in ((0, etype[0]), (1, etype[2])):
        if ei.size(1) and (int(ei[row].min()) < 0 or int(ei[row].max()) >= num_nodes[t]):
            raise InvalidArgumentError(_WHERE, name, f"row {row} in [{int(ei[row].min())}, "
                                       f"{int(ei[row].max())}]", f"node ids in [0, {num_nodes[t]})")
    return ei


def _collect_node_attrs(g: TypedGraph, ntype: NodeType, store, is_hetero: bool) -> None:
    n = g.num_nodes[ntype]
    attrs = {}
    for key, value in store.items():
        if key in _SKIP or (not is_hetero and (_is_edge_level(store, key, value) or _is_edge_time(store, key))):
            continue
        if not is_hetero and not _is_node_level(store, key, value):
            continue  # graph-level; handled by _collect_graph_attrs
        if not isinstance(value, Tensor) or value.dim() == 0 or value.size(0) != n:
            raise InvalidArgumentError(_WHERE, f"data[{ntype!r}].{key}", getattr(value, "shape", value),
                                       f"a tensor with one row per node ({n})")
        if key == NODE_TIME:
            g.node_time[ntype] = value
        else:
            attrs[key] = value
    g.node_attrs[ntype] = attrs


def _collect_edge_attrs(g: TypedGraph, etype: EdgeType, store, is_hetero: bool) -> None:
    m = g.num_edges(etype)
    attrs = {}
    for key, value in store.items():
        edge_time = key == EDGE_TIME or (key == NODE_TIME and (is_hetero or _is_edge_time(store, key, warn=True)))
        if key in _SKIP or (not is_hetero and not edge_time and not _is_edge_level(store, key, value)):
            continue
        if not isinstance(value, Tensor) or value.dim() == 0 or value.size(0) != m:
            raise InvalidArgumentError(_WHERE, f"data[{etype!r}].{key}", getattr(value, "shape", value),
                                       f"a tensor with one row per edge ({m})")
        if edge_time and etype in g.edge_time:
            raise InvalidArgumentError(_WHERE, f"data[{etype!r}].{key}", "both 'time' and 'edge_time'",
                                       "one edge time per edge type: PyG's Partitioner takes an edge attribute "
                                       "named 'time' as edge time too; drop or rename one of them")
        if edge_time:
            g.edge_time[etype] = value  # 'time' on edges is edge time, as PyG's Partitioner decides
        else:
            attrs[key] = value
    g.edge_attrs[etype] = attrs


def _is_edge_time(store, key: str, warn: bool = False) -> bool:
    """Whether a homogeneous graph's ``time`` is edge time (PyG's ``is_edge_attr('time')``): one value per edge,
    not one per node. With as many nodes as edges it stays node time, and a warning says so."""
    value = store.get(key) if key == NODE_TIME else None
    if not isinstance(value, Tensor) or value.dim() == 0:
        return False
    n, m = store.num_nodes, store.num_edges
    if warn and value.size(0) == m == n:
        LOG.warning("%s: data.time has %d values, one per node and one per edge (as many nodes as edges): taken as "
                    "node time; name it edge_time to partition it as edge time (PyG's Partitioner would take it as "
                    "both)", _WHERE, n)
    return value.size(0) == m and m != n


def _is_edge_level(store, key, value) -> bool:
    return isinstance(value, Tensor) and key != "time" and store.is_edge_attr(key)


def _is_node_level(store, key, value) -> bool:
    if key.endswith("_mask") or key in ("x", "y", "time"):
        return True  # always per node: a wrong length is an error, not a graph attribute
    return isinstance(value, Tensor) and store.is_node_attr(key)


def _collect_graph_attrs(g: TypedGraph, data, is_hetero: bool) -> None:
    if is_hetero:
        items = list(data.to_dict().get("_global_store", {}).items())
    else:
        items = [(k, v) for k, v in data.items()
                 if not (k in _SKIP or _is_edge_level(data, k, v) or _is_node_level(data, k, v))]
    for key, value in items:
        if isinstance(value, Tensor) and value.numel() == 1:
            value = value.item()
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            raise InvalidArgumentError(_WHERE, f"data.{key}", type(value).__name__,
                                       "a per-node or per-edge tensor, or a JSON-serialisable scalar") from None
        g.graph_attrs[key] = value
