"""``NeighborSampler``: PyG's neighbour sampler semantics on pyg_dist's own kernels (no pyg-lib)."""
from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_dist._types import HOMO_EDGE, HOMO_NODE, EdgeType, NodeType
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.ops import CSC, SAMPLER_BACKENDS, normalize_time, numba_available, resolve_backend
from pyg_dist.sampler.base import SamplerBase, check_sampling_args
from pyg_dist.sampler.graph import SamplingGraph
from pyg_dist.sampler.hops import run_sync
from pyg_dist.sampler.output import TypedSample
from pyg_dist.sampler.store_pair import check_pair, is_store_pair, pair_graph

_WHERE = "NeighborSampler"


def _stores(data):
    """The boundary converter: typed node and edge stores of a ``Data`` / ``HeteroData``."""
    if isinstance(data, HeteroData):
        node_types, edge_types = data.metadata()
        return [(t, data[t]) for t in node_types], [(et, data[et]) for et in edge_types]
    if isinstance(data, Data):
        return [(HOMO_NODE, data)], [(HOMO_EDGE, data)]
    raise InvalidArgumentError(_WHERE, "data", type(data).__name__, "a torch_geometric Data or HeteroData")


def _time_level(nodes, edges, time_attr: Optional[str]) -> Optional[str]:
    if time_attr is None:
        return None
    on_nodes = any(time_attr in s and s.is_node_attr(time_attr) for _, s in nodes)
    on_edges = any(time_attr in s and s.is_edge_attr(time_attr) for _, s in edges)
    if on_nodes == on_edges:
        raise InvalidArgumentError(_WHERE, "time_attr", time_attr,
                                   "an attribute of either the nodes or the edges (found on "
                                   + ("both: the time attribute holds both node-level and edge-level information)"
                                      if on_nodes else "neither: the time attribute is neither a node-level or "
                                      "edge-level attribute)"))
    return "node" if on_nodes else "edge"


def _build_graph(data, time_attr, weight_attr, is_sorted: bool, share_memory: bool, compact: bool):
    """``(SamplingGraph, time level)`` of an in-memory ``Data`` / ``HeteroData`` (``compact``: int32 ids in
    the CSC where they fit, what the numba kernels read fastest; see :meth:`CSC.compact`)."""
    nodes, edges = _stores(data)
    level = _time_level(nodes, edges, time_attr)
    num_nodes = {t: int(s.num_nodes or 0) for t, s in nodes}
    node_time = {t: normalize_time(s[time_attr]) for t, s in nodes if time_attr in s} if level == "node" else {}
    csc = {}
    for et, s in edges:
        edge_index = _edge_index(s, et)
        edge_time = s[time_attr].view(-1) if level == "edge" and time_attr in s else None
        src_time = node_time.get(et[0])  # PyG's order of in-neighbours: by source time, or by edge time
        key = edge_time if level == "edge" else (None if src_time is None or is_sorted
                                                 else src_time[edge_index[0].long()])
        csc[et] = CSC.from_edge_index(edge_index, num_nodes[et[2]], weight=_weight(s, et, weight_attr),
                                      edge_time=edge_time, is_sorted=is_sorted, sort_key=key).validate(_WHERE)
        if compact:
            csc[et] = csc[et].compact()
        if share_memory:
            csc[et].share_memory_()
    return SamplingGraph.in_memory([t for t, _ in nodes], [et for et, _ in edges], num_nodes, csc, node_time), level


def _edge_index(store, et) -> Tensor:
    """``edge_index`` of an edge store; a ``Data`` without one has no edges (PyG samples it: zero hops,
    or link batches holding the label edges' endpoints)."""
    if "edge_index" in store:
        return store.edge_index
    if et == HOMO_EDGE:
        return torch.empty(2, 0, dtype=torch.long)
    raise InvalidArgumentError(_WHERE, "data", et, "an edge_index for every edge type")


def _weight(store, et, weight_attr) -> Optional[Tensor]:
    if weight_attr is None:
        return None
    if weight_attr not in store:
        raise InvalidArgumentError(_WHERE, "weight_attr", weight_attr, f"an attribute of edge type {et}")
    weight = store[weight_attr].view(-1)
    if bool((weight < 0).any()) or not weight.is_floating_point():
        raise InvalidArgumentError(_WHERE, "weight_attr", weight_attr, "non-negative float weights")
    return weight


class NeighborSampler(SamplerBase):
    """In-memory (heterogeneous) neighbour sampler with PyG's semantics and pyg_dist's kernels.

    Takes the arguments of ``torch_geometric.sampler.NeighborSampler`` plus ``backend``. Output node
    lists start with the seeds, then new nodes in first-seen order; ``row``/``col`` are local indices
    (``row`` = neighbour, ``col`` = seed side); ``edge`` holds the TRUE edge ids of ``data`` (so
    :attr:`edge_permutation` is ``None``); ``batch`` is set when ``disjoint`` (forced by temporal
    sampling, like PyG).

    With the numba kernels the sampler keeps its CSC's source and edge ids as int32 when they fit
    (:meth:`~pyg_dist.ops.csc.CSC.compact`): 8 bytes per edge instead of 16 after the sort, and the
    sampling pass reads half the bytes. With ``is_sorted=True`` that int32 copy of the sources (4 bytes per
    edge) is the sampler's own memory: the int64 ``edge_index`` stays with ``data``.

    Args:
        data: A ``Data``, a ``HeteroData``, or any PyG ``(FeatureStore, GraphStore)`` pair (read through
            PyG's store API once and cached per pair: :mod:`pyg_dist.sampler.store_pair`; node time, edge
            time and edge weights come from the feature store's node / edge groups). A node type without
            ``time_attr`` is not time-filtered (PyG's rule).
        num_neighbors: Fanout per hop (``-1`` = all), or a dict per edge type, or ``NumNeighbors``.
        subgraph_type: ``'directional'``, ``'bidirectional'``, ``'induced'`` (every edge of the graph among
            the sampled nodes: :mod:`pyg_dist.sampler.induced`) or ``'disjoint'`` (= ``disjoint=True``).
        replace: Sample with replacement.
        disjoint: Each seed gets its own subgraph. Without it, repeated seeds share one neighbourhood
            and the output's first rows are the seeds as given, repeats included (PyG's layout).
        temporal_strategy: ``'uniform'`` or ``'last'``.
        time_attr: Node- or edge-level timestamp attribute; no sampled neighbour is newer than its seed.
        weight_attr: Edge attribute with non-negative sampling weights (zero = never sampled).
        is_sorted: ``edge_index`` is already sorted by destination (no sort, no sorted copy).
        share_memory: Move the CSC to shared memory (for DataLoader workers).
        directed: PyG's deprecated flag: ``False`` means ``subgraph_type='induced'``.
        sample_direction: ``'forward'`` (PyG's default: in-edges); ``'backward'`` raises.
        backend: ``'auto'`` (numba on CPU, else torch), ``'numba'``, ``'torch'``, ``'pyg-lib'``,
            ``'torch-sparse'`` (the last two only when importable).

    Example:
        >>> from pyg_dist.datasets import synthetic_graph
        >>> data = synthetic_graph(1000, 8)
        >>> sampler = NeighborSampler(data, [10, 5])
        >>> out = sampler.sample_from_nodes(NodeSamplerInput(None, torch.arange(4)))
        >>> out.node[:4].tolist()
        [0, 1, 2, 3]
    """

    _where = _WHERE

    def __init__(self, data: Union[Data, HeteroData, tuple], num_neighbors, subgraph_type: str = "directional",
                 replace: bool = False, disjoint: bool = False, temporal_strategy: str = "uniform",
                 time_attr: Optional[str] = None, weight_attr: Optional[str] = None, is_sorted: bool = False,
                 share_memory: bool = False, directed: bool = True, sample_direction: str = "forward",
                 backend: str = "auto"):
        if sample_direction != "forward":
            raise InvalidArgumentError(_WHERE, "sample_direction", sample_direction,
                                       "'forward' (backward sampling along out-edges is not supported)")
        subgraph_type = check_sampling_args(_WHERE, num_neighbors, subgraph_type, temporal_strategy, directed)
        if is_store_pair(data):
            self._graph, time_level, view = pair_graph(_WHERE, data, time_attr, weight_attr, is_sorted, share_memory)
            self.is_hetero = view.is_hetero
        else:
            check_pair(_WHERE, data)
            self.is_hetero = isinstance(data, HeteroData)
            compact = backend in ("auto", "numba") and numba_available()  # the numba kernels read int32 ids
            self._graph, time_level = _build_graph(data, time_attr, weight_attr, is_sorted, share_memory, compact)
        self.node_types, self.edge_types = self._graph.node_types, self._graph.edge_types
        self.num_nodes: Dict[NodeType, int] = self._graph.num_nodes
        device = next(iter(self._graph.csc.values())).colptr.device if self._graph.csc else None
        self.backend = resolve_backend(backend, device, _WHERE, SAMPLER_BACKENDS)
        kernel = self.backend if self.backend in ("numba", "torch") else "torch"
        self._set_sampling(num_neighbors, subgraph_type, replace, disjoint, temporal_strategy, time_level,
                           weight_attr is not None, kernel)

    @property
    def edge_time(self) -> Optional[Dict[EdgeType, Tensor]]:
        """Per edge type with edge time, the time of every edge in CSC order (edge-level temporal)."""
        if self.time_level != "edge":
            return None
        return {et: c.edge_time for et, c in self._graph.csc.items() if c.edge_time is not None}

    @property
    def edge_permutation(self):
        """``None``: ``edge`` in the outputs already holds the ids of the input graph."""
        return None

    @property
    def graph(self) -> SamplingGraph:
        """The typed CSC graph the sampler reads."""
        return self._graph

    def __getstate__(self):
        state = dict(self.__dict__)
        pools = {t: [] for t in self.node_types}  # scratch maps stay in their process
        state["_options"] = dataclasses.replace(self._options, pools=pools)
        return state

    def _run(self, coro):
        return run_sync(coro)

    async def _hops(self, seed, seed_time, key: int) -> TypedSample:
        if self.backend in ("pyg-lib", "torch-sparse"):
            from pyg_dist.ops.native import native_sample
            return TypedSample(**native_sample(self, seed, seed_time))
        return await super()._hops(seed, seed_time, key)


__all__ = ["NeighborSampler"]
