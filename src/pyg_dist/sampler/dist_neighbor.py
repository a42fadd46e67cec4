"""``DistNeighborSampler``: PyG's neighbour sampling over a partitioned graph, one process per partition.

Every process builds the sampler over its own partition's stores. A batch runs as a coroutine on
pyg_dist's event loop (the hop loop of :mod:`pyg_dist.sampler.hops`: per hop one request per remote
partition, the local part sampled meanwhile), then one feature round (:mod:`.features`).

Serving: every process that joins RPC answers its peers for its partition (one-hop sampling and feature
lookups) once :func:`serve_partition` has registered the callees, which must happen before
``init_rpc``. :func:`pyg_dist.train.session.dist_session` does it for the trainers (``num_workers=0``); the
loaders' sampler workers do it in their ``worker_init_fn`` (``num_workers > 0``).
"""
from __future__ import annotations

import asyncio
import dataclasses
import functools
from typing import Dict, Optional, Sequence

from torch import Tensor

from pyg_dist._types import HOMO_EDGE, HOMO_NODE, NodeType, as_typed
from pyg_dist.errors import InvalidArgumentError, check_positive_int
from pyg_dist.ops import resolve_backend
from pyg_dist.sampler import features, timing
from pyg_dist.sampler.base import SamplerBase, check_sampling_args
from pyg_dist.sampler.graph import SamplingGraph
from pyg_dist.sampler.hops import sample_hops, serve_one_hop
from pyg_dist.sampler.links import LinkMetadata, TripletMetadata
from pyg_dist.sampler.messages import ONE_HOP_OP, DistLinkMetadata, DistNodeMetadata, DistTripletMetadata, FeatureBatch
from pyg_dist.sampler.output import TypedSample
from pyg_dist.sampler.stats import SamplerStats, remote_count
from pyg_dist.store.quant import check_remote_rows

_WHERE = "DistNeighborSampler"
#: ``time_attr`` values and the level they select (the partition folder's attribute names).
TIME_ATTRS = {"time": "node", "edge_time": "edge"}
WEIGHT_ATTR = "edge_weight"


def serve_partition(graph_store, feature_store) -> None:
    """Serves this process's partition to its peers: one-hop sampling and feature lookups. The one way to
    serve a partition (:func:`~pyg_dist.train.session.dist_session` calls it; so do sampler workers).

    Call it in every process that joins RPC, before ``init_rpc``; it replaces whatever served these
    names before (one partition per process). It declares the folder's partitioning
    (:func:`~pyg_dist.format.folder_id`): every request this process sends carries it, and a request
    carrying another one is refused (a ``RemoteCallError`` at the caller naming both).
    ``graph_store=None`` serves feature lookups only (a world that fetches features but samples nowhere else).

    Example:
        >>> graph, feats = load_stores(root, ctx=ctx)           # doctest: +SKIP
        >>> serve_partition(graph, feats); init_rpc(ctx)        # doctest: +SKIP
    """
    from pyg_dist import rpc
    from pyg_dist.format import folder_id
    from pyg_dist.store import LocalFeatureStore
    if not isinstance(feature_store, LocalFeatureStore):
        raise InvalidArgumentError("serve_partition", "feature_store", feature_store, "a LocalFeatureStore")
    rpc.set_partitioning(folder_id(feature_store.partition_meta))  # requests from another one are refused
    if graph_store is not None:
        _check_graph_store(graph_store)
        graph = SamplingGraph.from_store(graph_store)
        # one-hop replies share the store's serving budget with its lookups ($PYG_DIST_SERVE_BUDGET_MB per process)
        rpc.register_callee(ONE_HOP_OP, functools.partial(serve_one_hop, graph, budget=feature_store._budget,
                                                          pool=feature_store._reply_pool), replace=True)
    feature_store.serve(replace=True)


def _check_graph_store(gs):
    from pyg_dist.store import LocalGraphStore
    if not isinstance(gs, LocalGraphStore):
        raise InvalidArgumentError(_WHERE, "graph_store", gs, "a pyg_dist.store.LocalGraphStore")
    return gs


def _check_device_index(index):
    from pyg_dist.cache.device import DeviceRowIndex
    if index is not None and not isinstance(index, DeviceRowIndex):
        raise InvalidArgumentError(_WHERE, "device_index", index, "None or a DeviceRowIndex (gpu_cache.index)")
    return index


def _time_level(meta, time_attr) -> Optional[str]:
    if time_attr is None:
        return None
    level = TIME_ATTRS.get(time_attr) if isinstance(time_attr, str) else None
    has = None if level is None else {"node": meta.node_time_types, "edge": meta.edge_time_types}.get(level)
    if not has:
        named = {k: v for k, v in (meta.extra.get("edge_feat_keys") or {}).items() if "time" in v}
        hint = (f"; its edge attributes named 'time' ({sorted(named)}) were kept as plain attributes by an older "
                "partitioner" if named else "")
        raise InvalidArgumentError(_WHERE, "time_attr", time_attr,
                                   f"None, 'time' (node time; the folder has it for {meta.node_time_types}) or "
                                   f"'edge_time' (edge time; the folder has it for {meta.edge_time_types}){hint}. "
                                   "Time is fixed when the graph is partitioned: give the graph node 'time' or edge "
                                   "'edge_time' (an edge attribute named 'time' is edge time too, as in PyG) and "
                                   "partition it again (pyg-dist-partition, or Partitioner(...).save / "
                                   "pyg_dist.distributed.Partitioner)")
    return level


def _weighted(meta, weight_attr) -> bool:
    if weight_attr is None:
        return False
    if weight_attr != WEIGHT_ATTR or not meta.weight_types:
        raise InvalidArgumentError(_WHERE, "weight_attr", weight_attr,
                                   f"None or {WEIGHT_ATTR!r} (the folder's weighted edge types: {meta.weight_types})")
    return True


class DistNeighborSampler(SamplerBase):
    """Neighbour sampler over a partitioned graph (PyG ``BaseSampler``; PyG's sampling semantics).

    Outputs equal those of :class:`pyg_dist.sampler.NeighborSampler` on the whole (relabelled) graph:
    node lists start with the seeds, then new nodes in first-seen order; ``edge`` holds global edge
    ids; ids are GLOBAL ids of the partition folder (``load_original_ids`` maps them back).
    ``metadata`` is PyG's plus ``features`` (a :class:`~pyg_dist.sampler.messages.FeatureBatch`):
    :class:`DistNodeMetadata`, :class:`DistLinkMetadata` or :class:`DistTripletMetadata`.

    Args:
        graph_store / feature_store: This process's stores (``pyg_dist.store.load_stores``).
        num_neighbors: Fanout per hop (``-1`` = all), a dict per edge type, or ``NumNeighbors``.
        replace: Sample with replacement.
        subgraph_type: ``'directional'``, ``'bidirectional'``, ``'induced'`` (the same nodes, every edge of
            the graph among them: :mod:`pyg_dist.sampler.induced`; not with disjoint or temporal sampling)
            or ``'disjoint'``.
        disjoint: Each seed gets its own subgraph (forced by temporal sampling).
        temporal_strategy: ``'uniform'`` or ``'last'``.
        time_attr: ``'time'`` (node time) or ``'edge_time'`` (edge time); no neighbour is newer than
            its seed.
        weight_attr: ``'edge_weight'`` to sample proportionally to the folder's edge weights.
        directed: PyG's deprecated flag: ``False`` means ``subgraph_type='induced'``.
        backend: Kernel backend, ``'auto'``, ``'numba'`` or ``'torch'``.
        concurrency: Batches in flight at once through the ``*_async`` methods.
        fetch_features: Fetch node / edge rows into ``metadata.features``.
        node_attrs / edge_attrs: Attributes to fetch (default ``x, y, time`` / ``edge_attr, edge_time``,
            where the folder has them).
        timeout: Seconds per remote call (default: the failure bound, :mod:`pyg_dist.timeouts`).
        stats: A :class:`SamplerStats` to count into (default: no counting).
        remote_rows: How feature rows owned by other partitions travel: ``"exact"`` (default) or ``"int8"``
            (opt-in: floating feature rows such as ``x`` / ``edge_attr`` as int8 codes with a float32 scale and
            offset per row, ~4x fewer bytes for float32; each element within ``scale / 2`` of its value, ``scale =
            (max - min) / 255`` over its row, plus float32 rounding: :mod:`pyg_dist.store.quant`). Local and
            cached rows, labels, masks, ids and times stay exact.
        device_index: A :class:`~pyg_dist.cache.device.DeviceRowIndex` (``gpu_cache.index`` of a
            :class:`~pyg_dist.cache.device.DeviceFeatureCache`): the node rows it holds are not fetched and
            arrive in ``metadata.features.device`` (the loader's device stage fills them). Default ``None``.

    Example:
        >>> graph, feats = load_stores("/tmp/demo-2", ctx=ctx)                     # doctest: +SKIP
        >>> serve_partition(graph, feats)           # every RPC member serves its partition  # doctest: +SKIP
        >>> sampler = DistNeighborSampler(graph, feats, [15, 10, 5])                # doctest: +SKIP
        >>> with rpc_session(ctx):                                                 # doctest: +SKIP
        ...     out = sampler.sample_from_nodes(NodeSamplerInput(None, seeds))
        ...     x = out.metadata.features.node["_N"]["x"]                          # rows of out.node
    """

    _where = _WHERE

    def __init__(self, graph_store, feature_store, num_neighbors, *, replace: bool = False,
                 subgraph_type: str = "directional", disjoint: bool = False, temporal_strategy: str = "uniform",
                 time_attr: Optional[str] = None, weight_attr: Optional[str] = None, directed: bool = True,
                 backend: str = "auto", concurrency: int = 1, fetch_features: bool = True,
                 node_attrs: Optional[Sequence[str]] = None, edge_attrs: Optional[Sequence[str]] = None,
                 timeout: Optional[float] = None, stats: Optional[SamplerStats] = None, remote_rows: str = "exact",
                 device_index=None):
        meta = _check_graph_store(graph_store).partition_meta
        self._check_feature_store(graph_store, feature_store, fetch_features)
        subgraph_type = check_sampling_args(_WHERE, num_neighbors, subgraph_type, temporal_strategy, directed)
        if stats is not None and not isinstance(stats, SamplerStats):
            raise InvalidArgumentError(_WHERE, "stats", stats, "None or a SamplerStats")
        from pyg_dist import timeouts
        from pyg_dist.errors import check_seconds
        timeout = timeouts.call_timeout() if timeout is None else check_seconds(_WHERE, "timeout", timeout)
        self.graph_store, self.feature_store = graph_store, feature_store
        self.is_hetero = meta.is_hetero
        self.node_types, self.edge_types = list(meta.node_types), list(meta.edge_types)
        self.num_nodes: Dict[NodeType, int] = dict(meta.num_nodes)
        self.time_attr, self.weight_attr = time_attr, weight_attr
        self.concurrency = check_positive_int(_WHERE, "concurrency", concurrency)
        self.fetch_features, self.stats, self.timeout = bool(fetch_features), stats, float(timeout)
        self.remote_rows = check_remote_rows(_WHERE, remote_rows)
        self.device_index = _check_device_index(device_index)
        self._set_sampling(num_neighbors, subgraph_type, replace, disjoint, temporal_strategy,
                           _time_level(meta, time_attr), _weighted(meta, weight_attr),
                           resolve_backend(backend, None, _WHERE), self.timeout)
        for arg, value in (("node_attrs", node_attrs), ("edge_attrs", edge_attrs)):
            if value is not None and (isinstance(value, str) or not all(isinstance(a, str) for a in value)):
                raise InvalidArgumentError(_WHERE, arg, value, "None or a list of attribute names")
        self._explicit = (node_attrs, edge_attrs)
        self._attr_wanted = (tuple(node_attrs or features.DEFAULT_NODE_ATTRS),
                             tuple(edge_attrs or features.DEFAULT_EDGE_ATTRS))
        self._setup()

    def _setup(self) -> None:
        self._graph = SamplingGraph.from_store(self.graph_store)
        self._options = dataclasses.replace(self._options, pools={t: [] for t in self.node_types})
        self._node_attrs, self._edge_attrs = {}, {}
        if self.fetch_features:
            self._node_attrs = features.attrs_per_group(self.feature_store, self.node_types, self._attr_wanted[0])
            self._edge_attrs = features.attrs_per_group(self.feature_store, self.edge_types, self._attr_wanted[1])
            for arg, given, found in (("node_attrs", self._explicit[0], self._node_attrs),
                                      ("edge_attrs", self._explicit[1], self._edge_attrs)):
                missing = [a for a in given or () if not any(a in v for v in found.values())]
                if missing:
                    raise InvalidArgumentError(_WHERE, arg, list(given or ()), f"attributes the folder stores (no type "
                                               f"has {missing})")
        self._slots: Dict[int, tuple] = {}

    @staticmethod
    def _check_feature_store(gs, fs, fetch: bool) -> None:
        from pyg_dist.store import LocalFeatureStore
        if fs is None and not fetch:
            return
        if not isinstance(fs, LocalFeatureStore):
            raise InvalidArgumentError(_WHERE, "feature_store", fs, "a pyg_dist.store.LocalFeatureStore")
        if fs.partition != gs.partition or str(fs.partition_meta.root) != str(gs.partition_meta.root):
            raise InvalidArgumentError(_WHERE, "feature_store", fs,
                                       f"the feature store of the same folder and partition as {gs!r}")

    def __getstate__(self):
        state = dict(self.__dict__)
        for key in ("_graph", "_slots", "_node_attrs", "_edge_attrs"):
            state.pop(key, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._setup()

    @property
    def edge_permutation(self):
        """``None``: ``edge`` in the outputs holds the folder's global edge ids."""
        return None

    @property
    def partition(self) -> int:
        return self._graph.partition

    @property
    def batch_timeout(self) -> float:
        """Bound of one synchronous batch: a call timeout per hop (one more for induced subgraphs), plus the
        feature round and slack."""
        return self.timeout * (self._options.num_hops + 2 + (self.subgraph_type == "induced"))

    def _run(self, coro):
        from pyg_dist.rpc import run_coroutine
        return run_coroutine(coro, self.batch_timeout)

    def lookup_rows(self, node: Dict[NodeType, Tensor], edge=None) -> FeatureBatch:
        """Rows of typed global node / edge ids (one request per remote partition), as in a batch.

        Example:
            >>> fb = sampler.lookup_rows({"_N": torch.tensor([0, 9])})  # doctest: +SKIP
        """
        return self._run(self.fetch_features_async(node, edge))

    async def fetch_features_async(self, node: Dict[NodeType, Tensor], edge=None) -> FeatureBatch:
        """Coroutine of :meth:`lookup_rows` (attributes chosen at construction)."""
        return await features.fetch_features_async(self.feature_store, node, edge or {}, self._node_attrs,
                                                   self._edge_attrs, self.stats, self.remote_rows)

    async def _hops(self, seed, seed_time, key: int) -> TypedSample:
        return await sample_hops(self._graph, self._options, seed, seed_time, key, self.stats)

    async def _finish(self, out, metadata):
        node, edge = as_typed(out.node, HOMO_NODE, self.is_hetero), as_typed(out.edge, HOMO_EDGE, self.is_hetero)
        fetched = None
        if self.fetch_features:  # a batch's rows: those a GPU cache holds stay out (metadata.features.device)
            fetched = await features.fetch_features_async(self.feature_store, node, edge or {}, self._node_attrs,
                                                          self._edge_attrs, self.stats, self.remote_rows,
                                                          self.device_index)
        if isinstance(metadata, TripletMetadata):
            out.metadata = DistTripletMetadata(*metadata, fetched, timing.current())
        elif isinstance(metadata, LinkMetadata):
            out.metadata = DistLinkMetadata(*metadata, fetched, timing.current())
        else:
            out.metadata = DistNodeMetadata(*metadata, fetched, timing.current())
        if self.stats is not None:
            self.stats.batches += 1
            for t, ids in node.items():
                remote = remote_count(self._graph.book, self.partition, t, ids)[0]
                self.stats.nodes_remote += remote
                self.stats.nodes_local += ids.numel() - remote
        return out

    def _slot(self) -> asyncio.Semaphore:
        """The semaphore bounding batches in flight on the running loop (one per loop: a forked
        worker runs its own loop; the entry keeps its loop alive, so ids are not reused)."""
        loop = asyncio.get_running_loop()
        entry = self._slots.get(id(loop))
        if entry is None or entry[0] is not loop:
            entry = self._slots[id(loop)] = (loop, asyncio.Semaphore(self.concurrency))
        return entry[1]


__all__ = ["DistNeighborSampler", "serve_partition", "TIME_ATTRS", "WEIGHT_ATTR"]
