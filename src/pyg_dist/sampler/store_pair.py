"""Any PyG ``(FeatureStore, GraphStore)`` pair as a graph to sample (PyG's remote-backend contract).

PyG's loaders take ``data=(feature_store, graph_store)`` for any implementation of
``torch_geometric.data.FeatureStore`` / ``GraphStore``: an in-memory pair, a database, a partition. This
module reads such a pair ONLY through that public API:

* :func:`pair_view`: node and edge types, node counts and the attributes per type (typed keys: a
  homogeneous pair uses ``"_N"`` / ``("_N", "_E", "_N")`` like every other pyg_dist input);
* :func:`pair_coo`: an edge type's edges as COO, whatever layout the graph store holds (COO, CSR or CSC);
  edge ``i`` is the ``i``-th edge of that layout (PyG's ``e_id``), or the store's own ids when it has
  ``get_edge_id`` (pyg_dist's partition stores);
* :func:`pair_graph`: the :class:`~pyg_dist.sampler.graph.SamplingGraph` the hop loop reads, with node
  time (``time_attr`` on node groups), edge time (``time_attr`` on edge groups) and edge weights
  (``weight_attr`` on edge groups) from the feature store.

Attribute groups follow PyG: node attributes live in group ``None`` (homogeneous) or a node type; edge
attributes in a tuple group (an edge type, or ``(None, None)`` for a homogeneous graph).

Caching: the topology is read through the graph store ONCE per store pair and option set, and kept on the
graph store (attribute ``_pyg_dist_sampling``); every loader and sampler over the same pair shares it.
A pair whose edges change afterwards must call :func:`forget` (or build new stores).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from pyg_dist._types import HOMO_EDGE, HOMO_NODE, EdgeType, NodeType
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.ops import CSC, normalize_time

_CACHE = "_pyg_dist_sampling"


def is_store_pair(data: Any) -> bool:
    """Whether ``data`` is PyG's remote-backend input: a ``(FeatureStore, GraphStore)`` tuple."""
    from torch_geometric.data import FeatureStore, GraphStore
    return (isinstance(data, (tuple, list)) and len(data) == 2 and isinstance(data[0], FeatureStore)
            and isinstance(data[1], GraphStore))


def check_pair(where: str, data: Any) -> None:
    """A typed error for a 2-tuple that is not ``(FeatureStore, GraphStore)`` (e.g. swapped)."""
    from torch_geometric.data import FeatureStore, GraphStore
    if isinstance(data, (tuple, list)) and not is_store_pair(data):
        got = tuple(type(d).__name__ for d in data)
        if len(data) == 2 and isinstance(data[1], FeatureStore) and isinstance(data[0], GraphStore):
            raise InvalidArgumentError(where, "data", got, "(feature_store, graph_store) in that order (PyG's)")
        raise InvalidArgumentError(where, "data", got, "a Data, a HeteroData or a (FeatureStore, GraphStore) pair")


@dataclass(frozen=True)
class PairView:
    """What a store pair holds, in typed keys.

    Attributes:
        is_hetero: Whether the pair is heterogeneous (any named node group or edge type).
        node_types / edge_types: Typed; edge types in the graph store's order (which decides sampling
            order, as ``HeteroData.edge_types`` does for a ``HeteroData``).
        num_nodes: Nodes per type.
        edge_attrs: Per edge type, the ``EdgeAttr`` the edges are read from.
        node_attrs / edge_feats: Per type, the feature store's ``TensorAttr`` s (index unset).
    """
    is_hetero: bool
    node_types: List[NodeType]
    edge_types: List[EdgeType]
    num_nodes: Dict[NodeType, int]
    edge_attrs: Dict[EdgeType, Any]
    node_attrs: Dict[NodeType, List[Any]] = field(default_factory=dict)
    edge_feats: Dict[EdgeType, List[Any]] = field(default_factory=dict)

    def public(self, key):
        """The PyG key of a typed key: itself, or ``None`` / ``(None, None)`` in a homogeneous pair."""
        if self.is_hetero:
            return key
        return None if isinstance(key, str) else (None, None)


def _typed_edge(et, hetero: bool) -> EdgeType:
    return tuple(et) if hetero else HOMO_EDGE


def _layout_rank(attr) -> int:
    """COO first (its order is the edge ids), then CSC, then CSR."""
    return {"coo": 0, "csc": 1, "csr": 2}.get(getattr(attr.layout, "value", attr.layout), 3)


def _group_attrs(fs, hetero: bool):
    node: Dict[NodeType, List[Any]] = {}
    edge: Dict[EdgeType, List[Any]] = {}
    for attr in fs.get_all_tensor_attrs():
        g = attr.group_name
        if isinstance(g, (tuple, list)):
            edge.setdefault(_typed_edge(g, hetero) if hetero or g != (None, None) else HOMO_EDGE, []).append(attr)
        else:
            node.setdefault(g if hetero else HOMO_NODE, []).append(attr)
    return node, edge


def _node_count(fs, gs_attrs, t: NodeType, attrs, hetero: bool) -> Optional[int]:
    for attr in attrs.get(t, []):
        size = fs.get_tensor_size(attr)
        if size is not None and len(size):
            return int(size[0])
    for et, a in gs_attrs.items():
        if a.size is not None:
            if et[0] == t and a.size[0] is not None:
                return int(a.size[0])
            if et[2] == t and a.size[1] is not None:
                return int(a.size[1])
    return None


def _view(where: str, fs, gs) -> PairView:
    edge_list = gs.get_all_edge_attrs()
    hetero = any(a.edge_type is not None for a in edge_list) or any(
        isinstance(a.group_name, str) or (isinstance(a.group_name, tuple) and a.group_name != (None, None))
        for a in fs.get_all_tensor_attrs())
    chosen: Dict[EdgeType, Any] = {}
    for a in edge_list:
        if a.edge_type is not None and (not isinstance(a.edge_type, tuple) or len(a.edge_type) != 3):
            raise InvalidArgumentError(where, "data", a.edge_type, "edge types as (src, rel, dst) in the graph store")
        et = _typed_edge(a.edge_type, hetero) if a.edge_type is not None else HOMO_EDGE
        if et not in chosen or _layout_rank(a) < _layout_rank(chosen[et]):
            chosen[et] = a
    node_attrs, edge_feats = _group_attrs(fs, hetero)
    types = list(node_attrs) + [t for et in chosen for t in (et[0], et[2])]
    node_types = list(dict.fromkeys(types)) if hetero else [HOMO_NODE]
    counts: Dict[NodeType, int] = {}
    for t in node_types:
        n = _node_count(fs, chosen, t, node_attrs, hetero)
        if n is None:  # no feature and no size: the largest id the edges name
            ids = [pair_coo_raw(gs, a)[0 if et[0] == t else 1] for et, a in chosen.items() if t in (et[0], et[2])]
            n = max([int(i.max()) + 1 for i in ids if i.numel()] + [0])
        counts[t] = n
    return PairView(hetero, node_types, list(chosen), counts, chosen, node_attrs, edge_feats)


def _cache(gs) -> Dict:
    cache = gs.__dict__.get(_CACHE)
    if cache is None:
        cache = {}
        gs.__dict__[_CACHE] = cache
    return cache


def forget(graph_store) -> None:
    """Drops what pyg_dist cached about ``graph_store`` (call after changing its edges)."""
    graph_store.__dict__.pop(_CACHE, None)


def pair_view(where: str, data) -> PairView:
    """The :class:`PairView` of ``data = (feature_store, graph_store)`` (cached on the graph store)."""
    fs, gs = data
    key = ("view", id(fs))
    cache = _cache(gs)
    if key not in cache:
        cache[key] = _view(where, fs, gs)
    return cache[key]


def pair_coo_raw(gs, attr) -> Tuple[Tensor, Tensor]:
    """``(row, col)`` of one ``EdgeAttr`` whatever its layout (edge ``i``: the ``i``-th of that layout)."""
    row, col = gs.get_edge_index(attr)
    layout = getattr(attr.layout, "value", attr.layout)
    if layout == "csr":
        row = torch.repeat_interleave(torch.arange(row.numel() - 1), torch.diff(row))
    elif layout == "csc":
        col = torch.repeat_interleave(torch.arange(col.numel() - 1), torch.diff(col))
    return row.long(), col.long()


def pair_coo(data, et: EdgeType, view: PairView) -> Tuple[Tensor, Optional[Tensor]]:
    """``([2, E] edge_index, edge ids or None)`` of typed edge type ``et`` (cached)."""
    fs, gs = data
    cache = _cache(gs)
    if ("coo", et) not in cache:
        attr = view.edge_attrs[et]
        row, col = pair_coo_raw(gs, attr)
        eid = gs.get_edge_id(attr) if hasattr(gs, "get_edge_id") and hasattr(gs, "partition_meta") else None
        cache[("coo", et)] = (torch.stack([row, col]), eid)
    return cache[("coo", et)]


def _full(fs, attr) -> Tensor:
    """The whole tensor of ``attr`` (its index reset)."""
    whole = type(attr)(attr.group_name, attr.attr_name, None) if hasattr(attr, "group_name") else attr
    return fs.get_tensor(whole)


def _named(attrs: Dict[Any, List[Any]], name: Optional[str]) -> Dict[Any, Any]:
    return {k: a for k, lst in attrs.items() for a in lst if a.attr_name == name} if name else {}


def time_level(where: str, view: PairView, time_attr: Optional[str]) -> Optional[str]:
    """``"node"`` / ``"edge"``: where ``time_attr`` lives (node groups or edge groups); PyG's errors."""
    if time_attr is None:
        return None
    on_nodes, on_edges = _named(view.node_attrs, time_attr), _named(view.edge_feats, time_attr)
    if on_nodes and on_edges:
        raise InvalidArgumentError(where, "time_attr", time_attr, "a time attribute of nodes or of edges; the time "
                                   "attribute holds both node-level and edge-level information")
    if not on_nodes and not on_edges:
        raise InvalidArgumentError(where, "time_attr", time_attr, "an attribute of the feature store; the time "
                                   "attribute is neither a node-level or edge-level attribute")
    return "node" if on_nodes else "edge"


def _edge_values(where: str, fs, view: PairView, name: Optional[str], arg: str, num_edges: Dict[EdgeType, int]):
    out = {}
    for et, attr in _named(view.edge_feats, name).items():
        if et not in num_edges:
            continue
        value = _full(fs, attr).reshape(-1)
        if value.numel() != num_edges[et]:
            raise InvalidArgumentError(where, arg, name, f"one value per edge of {et} ({num_edges[et]}), "
                                       f"got {value.numel()}")
        out[et] = value
    return out


def _check_weights(where: str, weights: Dict[EdgeType, Tensor], name: str) -> None:
    if not weights:
        raise InvalidArgumentError(where, "weight_attr", name, "an attribute of an edge group of the feature store")
    for w in weights.values():
        if not w.is_floating_point() or bool((w < 0).any()):
            raise InvalidArgumentError(where, "weight_attr", name, "non-negative float weights")


def _check_ids(where: str, et: EdgeType, edge_index: Tensor, num_nodes: Dict[NodeType, int]) -> None:
    for row, t in ((edge_index[0], et[0]), (edge_index[1], et[2])):
        if row.numel() and (int(row.min()) < 0 or int(row.max()) >= num_nodes[t]):
            raise InvalidArgumentError(where, "data", f"edge ids of {et} in [{int(row.min())}, {int(row.max())}]",
                                       f"{t!r} ids in [0, {num_nodes[t]}) (the graph store's edges)")


def _node_time(where: str, fs, view: PairView, time_attr: str) -> Dict[NodeType, Tensor]:
    out = {}
    for t, attr in _named(view.node_attrs, time_attr).items():
        value = _full(fs, attr).reshape(-1)
        if value.numel() != view.num_nodes[t]:
            raise InvalidArgumentError(where, "time_attr", time_attr, f"one time per {t!r} node "
                                       f"({view.num_nodes[t]}), got {value.numel()}")
        out[t] = normalize_time(value)
    return out


def _time_key(et, edge_index: Tensor, times, node_time, is_sorted: bool) -> Optional[Tensor]:
    """The second sort key of ``et``'s in-edges (PyG's order for temporal sampling: source node time, or edge
    time); ``None`` when the graph store says its edges are sorted already (PyG then trusts their order)."""
    if is_sorted:
        return None
    if et in times:
        return times[et]
    src_time = node_time.get(et[0])
    return None if src_time is None else src_time[edge_index[0]]


def pair_graph(where: str, data, time_attr: Optional[str], weight_attr: Optional[str], is_sorted: bool,
               share_memory: bool):
    """``(SamplingGraph, time level, PairView)`` of a store pair (cached per pair and options)."""
    from pyg_dist.sampler.graph import SamplingGraph
    fs, gs = data
    view = pair_view(where, data)
    key = ("graph", id(fs), time_attr, weight_attr, is_sorted)
    cache = _cache(gs)
    if key not in cache:
        level = time_level(where, view, time_attr)
        coo = {et: pair_coo(data, et, view) for et in view.edge_types}
        for et, (ei, _) in coo.items():
            _check_ids(where, et, ei, view.num_nodes)
        num_edges = {et: ei.size(1) for et, (ei, _) in coo.items()}
        weights = _edge_values(where, fs, view, weight_attr, "weight_attr", num_edges)
        if weight_attr is not None:
            _check_weights(where, weights, weight_attr)
        times = _edge_values(where, fs, view, time_attr, "time_attr", num_edges) if level == "edge" else {}
        node_time = _node_time(where, fs, view, time_attr) if level == "node" and time_attr else {}
        csc = {et: CSC.from_edge_index(ei, view.num_nodes[et[2]], edge_id=eid, weight=weights.get(et),
                                       edge_time=times.get(et),
                                       sort_key=_time_key(et, ei, times, node_time, is_sorted or
                                                          bool(getattr(view.edge_attrs[et], "is_sorted", False))),
                                       ).validate(where) for et, (ei, eid) in coo.items()}
        cache[key] = (SamplingGraph.in_memory(view.node_types, view.edge_types, view.num_nodes, csc, node_time),
                      level)
    graph, level = cache[key]
    if share_memory:
        for c in graph.csc.values():
            c.share_memory_()
    return graph, level, view


__all__ = ["is_store_pair", "check_pair", "PairView", "pair_view", "pair_coo", "pair_graph", "time_level", "forget"]
