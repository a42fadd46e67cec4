"""What both distributed loaders share when they are built: their data and context, seeds per rank, the
sampler and the device (their iteration: :class:`~pyg_dist.loader.pipeline.DistPipelineLoader`).

* :func:`resolve_data` turns what the user passes (a :class:`~pyg_dist.train.session.DistEnv` or PyG's
  ``(feature_store, graph_store)`` pair) into stores and a :class:`~pyg_dist.context.DistContext`.
* Workers: :mod:`pyg_dist.loader.workers`; batches: :mod:`pyg_dist.loader.batch`.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

import torch

from pyg_dist.context import DistContext
from pyg_dist.errors import InvalidArgumentError


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
                                   "a pyg_dist.train.session.DistEnv or a (LocalFeatureStore, LocalGraphStore) pair")
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


#: The loaders' ``feature_dtype`` default: the ``TrainConfig.feature_dtype`` of a ``DistEnv``, else float32.
FROM_CONFIG = "auto"


def batch_dtype(where: str, value: Any, data: Any) -> Optional[torch.dtype]:
    """The dtype a loader casts its batches' features to (:data:`FROM_CONFIG`, a dtype or its name, ``None``)."""
    from pyg_dist.format.precision import BATCH_DTYPES, parse_dtype
    if isinstance(value, str) and value == FROM_CONFIG:
        value = getattr(getattr(data, "config", None), "feature_dtype", torch.float32)
    return parse_dtype(where, "feature_dtype", value, BATCH_DTYPES)


def begin(loader, where: str, data: Any, ctx: Optional[DistContext], seed: Optional[int], kwargs: dict,
          feature_dtype: Any = FROM_CONFIG):
    """The first steps of both distributed loaders: checked kwargs, seed and ``feature_dtype``, stores and
    context; sets the loader's ``ctx``, ``feature_dtype`` and the seed and rank its batch keys come from.
    Returns ``(fs, gs, ctx)``."""
    from pyg_dist.loader import _checks
    _checks.check_loader_kwargs(where, kwargs)
    loader._key_seed = _checks.check_seed(where, seed)
    loader.feature_dtype = batch_dtype(where, feature_dtype, data)
    fs, gs, ctx = resolve_data(where, data, ctx, kwargs.get("num_workers", 0))
    from pyg_dist.format.precision import check_batch_dtype
    check_batch_dtype(where, loader.feature_dtype, fs.partition_meta, fs.columns())  # no inf rows in batches
    loader.ctx, loader._key_rank = ctx, ctx.rank
    return fs, gs, ctx


def setup_env_device(loader, where: str, data: Any, device: Any, gpu_cache: Any, transform: Any) -> None:
    """The distributed loaders' device stage (:mod:`pyg_dist.loader.device`): ``"auto"`` takes a ``DistEnv``'s
    ``device`` (``dist_session``'s: ``cuda:LOCAL_RANK`` with CUDA, else ``cpu``) and its ``gpu_cache`` (when
    the loader's device is the cache's), else ``None``."""
    from pyg_dist.loader import device as D
    env = data if all(hasattr(data, a) for a in ("feature_store", "graph_store", "ctx")) else None
    if isinstance(device, str) and device == FROM_CONFIG:
        device = getattr(env, "device", None)
    device = D.resolve_device(where, device)
    if isinstance(gpu_cache, str) and gpu_cache == FROM_CONFIG:
        gpu_cache = getattr(env, "gpu_cache", None)
        if gpu_cache is not None and gpu_cache.device != device:
            gpu_cache = None
    D.setup_device(loader, where, device, gpu_cache, transform)


def rpc_choices(data: Any) -> dict:
    """``init_rpc``'s ``transport`` / ``wire_protection`` for the loader's sampler workers: a ``DistEnv``'s
    (``TrainConfig.rpc_choices()``), else ``{}`` (the variables', resolved when the workers are set up)."""
    choices = getattr(getattr(data, "config", None), "rpc_choices", None)
    return choices() if callable(choices) else {}


def start_timeout(data: Any) -> Optional[float]:
    """The sampler workers' start-up bound: a ``DistEnv``'s ``TrainConfig.timeout``, else ``None`` (the default)."""
    return getattr(getattr(data, "config", None), "timeout", None)


#: The loader arguments both distributed loaders pass through to ``DistNeighborSampler``.
SAMPLER_ARGS = ("replace", "subgraph_type", "disjoint", "temporal_strategy", "time_attr", "weight_attr", "directed",
                "concurrency", "node_attrs", "edge_attrs", "timeout", "remote_rows")


def make_sampler(where: str, graph_store, feature_store, num_neighbors, neighbor_sampler, args: Mapping[str, Any],
                 gpu_cache: Any = None):
    """The loader's sampler: ``neighbor_sampler`` when given (built with ``gpu_cache``'s index when there is a
    cache), else a ``DistNeighborSampler`` with the :data:`SAMPLER_ARGS` of ``args`` (the loader's arguments) and
    the ``gpu_cache``'s index."""
    index = gpu_cache.index if gpu_cache is not None else None
    if neighbor_sampler is not None:
        if getattr(neighbor_sampler, "device_index", None) is not index:  # both None, or the loader's cache's
            raise InvalidArgumentError(where, "neighbor_sampler", type(neighbor_sampler).__name__,
                                       "a DistNeighborSampler built with device_index=gpu_cache.index of the loader's "
                                       "gpu_cache (and without a device_index when the loader has no gpu_cache)")
        return neighbor_sampler
    from pyg_dist.loader import _checks
    from pyg_dist.sampler.dist_neighbor import DistNeighborSampler
    _checks.check_num_neighbors(where, num_neighbors)
    kw = {k: args[k] for k in SAMPLER_ARGS}
    if isinstance(kw["remote_rows"], str) and kw["remote_rows"] == FROM_CONFIG:  # a DistEnv's TrainConfig, or exact
        kw["remote_rows"] = getattr(getattr(args.get("data"), "config", None), "remote_rows", "exact")
    return DistNeighborSampler(graph_store, feature_store, num_neighbors, device_index=index, **kw)
