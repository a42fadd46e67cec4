"""Shared pieces of the distributed loaders: stores and context, seeds, workers, batch building.

* :func:`resolve_data` turns what the user passes (a :class:`~pyg_dist.train.DistEnv` or PyG's
  ``(feature_store, graph_store)`` pair) into stores and a :class:`~pyg_dist.context.DistContext`.
* :class:`WorkerSetup` is the ``worker_init_fn`` of ``num_workers > 0``: each DataLoader worker serves
  its trainer's partition and joins its loader's worker RPC world (RPC rank ``rank * W + worker_id``,
  one world per loader); it leaves that world when the worker exits.
* :func:`graph_batch`, :func:`node_batch`, :func:`link_batch` build ``Data`` / ``HeteroData`` from a
  sample. One code path: :func:`_slot` is the only place that knows a homogeneous batch is a ``Data``
  (its one node / edge type maps to the object itself). Fields follow PyG's loaders.
"""
from __future__ import annotations

import itertools
import logging
import os
from typing import Any, Callable, Optional, Tuple, Union

import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput

from pyg_dist._types import HOMO_EDGE, HOMO_NODE, as_typed
from pyg_dist.context import DistContext
from pyg_dist.errors import InvalidArgumentError

LOG = logging.getLogger("pyg_dist")


def resolve_data(where: str, data: Any, ctx: Optional[DistContext], num_workers: int):
    """``(feature_store, graph_store, ctx)`` from a ``DistEnv`` or a ``(feature_store, graph_store)`` pair."""
    from pyg_dist.store import LocalFeatureStore, LocalGraphStore

    if hasattr(data, "feature_store") and hasattr(data, "graph_store") and hasattr(data, "ctx"):
        fs, gs, ctx = data.feature_store, data.graph_store, ctx or data.ctx
    elif isinstance(data, (tuple, list)) and len(data) == 2:
        fs, gs = data
        if isinstance(fs, LocalGraphStore) and isinstance(gs, LocalFeatureStore):
            fs, gs = gs, fs
    else:
        raise InvalidArgumentError(where, "data", type(data).__name__,
                                   "a pyg_dist.train.DistEnv or a (LocalFeatureStore, LocalGraphStore) pair")
    if not isinstance(fs, LocalFeatureStore) or not isinstance(gs, LocalGraphStore):
        raise InvalidArgumentError(where, "data", (type(fs).__name__, type(gs).__name__),
                                   "a (LocalFeatureStore, LocalGraphStore) pair")
    if ctx is None:
        from pyg_dist import rpc
        ctx = rpc.current_context() if rpc.is_initialized() else DistContext.from_env(
            gs.num_partitions, num_workers=num_workers)
    if not isinstance(ctx, DistContext):
        raise InvalidArgumentError(where, "ctx", ctx, "a pyg_dist.context.DistContext")
    if (ctx.num_workers == 0) != (num_workers == 0):
        raise InvalidArgumentError(where, "num_workers", num_workers,
                                   f"{'0' if num_workers else '> 0'} like the context's num_workers "
                                   f"({ctx.num_workers}; TrainConfig.num_workers): with 0 the trainers sample "
                                   "in the trainer RPC world, with > 0 each loader's workers form their own")
    if ctx.partition != gs.partition or ctx.num_partitions != gs.num_partitions:
        raise InvalidArgumentError(where, "data", f"partition {gs.partition} of {gs.num_partitions}",
                                   f"partition {ctx.partition} of {ctx.num_partitions} (this rank's)")
    return fs, gs, ctx


def rank_share_args(ctx: DistContext, meta, ntype: str) -> Tuple[int, int, Optional[torch.Tensor]]:
    """``(share, num_shares, sub_bounds)`` of this rank inside its partition (for ``partition_share``)."""
    rpp = ctx.ranks_per_partition
    bounds = meta.sub_node_bounds.get(ntype) if meta.sub_parts == rpp and rpp > 1 else None
    if bounds is not None:
        p = ctx.partition
        bounds = bounds[p * rpp: (p + 1) * rpp + 1]
    return ctx.rank % rpp, rpp, bounds


#: Loaders with workers built so far in this process: the next one's RPC world index.
_WORKER_WORLDS = itertools.count()


def loader_kwargs(where: str, kwargs: dict, ctx: DistContext, stores) -> dict:
    """DataLoader kwargs for the deployment: workers serve and join RPC; they must be persistent.

    Each loader with workers gets its own worker RPC world (:meth:`DistContext.for_loader`: the
    ``k``-th such loader of a process rendezvouses on ``rpc_port + k``), so several can run at once;
    build them in the same order on every rank.
    """
    workers = kwargs.get("num_workers", 0)
    if workers == 0:
        return kwargs
    if kwargs.get("persistent_workers") is False:
        raise InvalidArgumentError(where, "persistent_workers", False,
                                   "True (or unset) with num_workers > 0: the workers are members of the "
                                   "RPC world and must live as long as the loader")
    out = dict(kwargs, persistent_workers=True)
    world = ctx.for_loader(next(_WORKER_WORLDS), workers)
    out["worker_init_fn"] = WorkerSetup(world, stores, kwargs.get("worker_init_fn"))
    return out


def make_sampler(where: str, graph_store, feature_store, num_neighbors, neighbor_sampler, **opts):
    """The loader's sampler: ``neighbor_sampler`` when given, else a ``DistNeighborSampler`` with ``opts``."""
    if neighbor_sampler is not None:
        return neighbor_sampler
    from pyg_dist.sampler.dist_neighbor import DistNeighborSampler
    from pyg_dist.loader import _checks
    _checks.check_num_neighbors(where, num_neighbors)
    return DistNeighborSampler(graph_store, feature_store, num_neighbors, **opts)


class DistLoaderMixin:
    """What both distributed loaders share: the agreed batch count, in-process prefetching
    (``concurrency`` batches in flight with ``num_workers=0``) and stopping their workers."""

    @property
    def _dist_sampler(self):
        return getattr(self, "node_sampler", None) or getattr(self, "link_sampler", None)

    def _start_batch(self, index):
        """The coroutine sampling one index batch (the loader's own ``collate_fn``, awaitable)."""
        raise NotImplementedError

    def _get_iterator(self):
        from pyg_dist.loader.prefetch import prefetch_iterator
        it = prefetch_iterator(self, self._start_batch)
        return it if it is not None else super()._get_iterator()

    @property
    def num_batches(self) -> int:
        """Batches per epoch (equal on every rank with ``seed_split="balanced"``)."""
        return self.seed_share.num_batches

    def shutdown(self) -> None:
        """Stops this loader's workers (they leave RPC); call it on every rank at the same point."""
        it = getattr(self, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()
        self._iterator = None


class WorkerSetup:
    """``worker_init_fn`` for ``num_workers > 0``: serve the partition, join RPC, leave it at exit."""

    def __init__(self, ctx: DistContext, stores, user_fn: Optional[Callable[[int], Any]] = None,
                 timeout: float = 120.0):
        self.ctx, self.stores, self.user_fn, self.timeout = ctx, stores, user_fn, timeout

    def __call__(self, worker_id: int) -> None:
        from multiprocessing import util

        from pyg_dist import rpc
        from pyg_dist._alloc import tune_allocator
        from pyg_dist.sampler.dist_neighbor import serve_partition

        fs, gs = self.stores
        tune_allocator()
        serve_partition(gs, fs)
        rpc.init_rpc(self.ctx.for_worker(worker_id), timeout=self.timeout)
        util.Finalize(None, _leave_rpc, args=(os.getppid(),), exitpriority=100)
        if self.user_fn is not None:
            self.user_fn(worker_id)


def _leave_rpc(parent: int) -> None:
    """Leaves RPC at worker exit: gracefully when the trainer stopped us; at once when it died (a
    forked worker holds the trainer's sockets, so lingering would hide its death from its peers)."""
    from pyg_dist import rpc
    orphan = os.getppid() != parent
    try:
        rpc.shutdown_rpc(graceful=not orphan, timeout=5.0 if orphan else 60.0)
    except Exception as exc:  # noqa: BLE001 -- a worker exiting cannot raise to anyone; say it loudly
        LOG.error("sampler worker left RPC uncleanly: %s", exc)


def _slot(data: Union[Data, HeteroData], key):
    """Where a typed key's attributes live: the ``Data`` itself, or ``data[key]``."""
    return data if isinstance(data, Data) else data[key]


def graph_batch(out: Union[SamplerOutput, HeteroSamplerOutput]) -> Union[Data, HeteroData]:
    """The subgraph part of a batch: edges, node and edge rows of ``metadata.features``, ids, counts."""
    hetero = isinstance(out, HeteroSamplerOutput)
    data = HeteroData() if hetero else Data()
    node = as_typed(out.node, HOMO_NODE, hetero)
    row, col = as_typed(out.row, HOMO_EDGE, hetero), as_typed(out.col, HOMO_EDGE, hetero)
    edge = as_typed(out.edge, HOMO_EDGE, hetero) if out.edge is not None else {}
    features = getattr(out.metadata, "features", None)
    for t, ids in node.items():
        store = _slot(data, t)
        for name, value in (features.node.get(t, {}) if features is not None else {}).items():
            store[name] = value
        store.n_id = ids
        if not hetero:
            data.num_nodes = ids.numel()
        else:
            store.num_nodes = ids.numel()
    for et in row:
        store = _slot(data, et)
        store.edge_index = torch.stack([row[et], col[et]])
        for name, value in (features.edge.get(et, {}) if features is not None else {}).items():
            store[name] = value
        if et in edge and edge[et] is not None:
            store.e_id = edge[et].to(torch.long)
    if hetero:
        data.set_value_dict("batch", out.batch)
        data.set_value_dict("num_sampled_nodes", out.num_sampled_nodes)
        data.set_value_dict("num_sampled_edges", out.num_sampled_edges)
    else:
        data.batch = out.batch
        data.num_sampled_nodes = out.num_sampled_nodes
        data.num_sampled_edges = out.num_sampled_edges
    return data


def node_batch(out, input_type: Optional[str]) -> Union[Data, HeteroData]:
    """A node-level batch: :func:`graph_batch` plus ``input_id``, ``seed_time``, ``batch_size``."""
    data = graph_batch(out)
    store = _slot(data, input_type or HOMO_NODE)
    md = out.metadata
    store.input_id = md.input_id
    store.seed_time = md.seed_time
    store.batch_size = md.input_id.size(0)
    return data


def link_batch(out, input_type, triplet: bool) -> Union[Data, HeteroData]:
    """A link-level batch: :func:`graph_batch` plus PyG's link metadata (binary or triplet)."""
    data = graph_batch(out)
    md = out.metadata
    et = tuple(input_type) if input_type is not None else HOMO_EDGE
    _slot(data, et).input_id = md.input_id
    if not triplet:
        store = _slot(data, et)
        store.edge_label_index = md.edge_label_index
        store.edge_label = md.edge_label
        store.edge_label_time = md.edge_label_time
        return data
    src, dst = _slot(data, et[0]), _slot(data, et[-1])
    src.src_index = md.src_index
    dst.dst_pos_index = md.dst_pos_index
    dst.dst_neg_index = md.dst_neg_index
    src.seed_time = md.seed_time
    dst.seed_time = md.seed_time
    return data


