"""The feature round of a batch: node rows (``x``, ``y``, ``time``) and edge rows (``edge_attr``,
``edge_time``) for every sampled node and edge, ONE request per remote partition for all types and
attributes together (through the feature store's ``lookup_many_async``), local rows read meanwhile.
``remote_rows="int8"`` (opt-in) asks the owners for quantised feature rows (:mod:`pyg_dist.store.quant`).
"""
from __future__ import annotations

from typing import Dict, Optional, Sequence, Union

from torch import Tensor

from pyg_dist._types import EdgeType, NodeType
from pyg_dist.sampler.messages import FeatureBatch
from pyg_dist.sampler.stats import SamplerStats
from pyg_dist.sampler.timing import StageTimes, current, timed

#: Attributes fetched by default, where the folder has them.
DEFAULT_NODE_ATTRS = ("x", "y", "time")
DEFAULT_EDGE_ATTRS = ("edge_attr", "edge_time")


def attrs_per_group(feature_store, groups, wanted: Sequence[str]) -> Dict:
    """Per typed group, the wanted attributes the folder actually stores (groups without any left out)."""
    out = {}
    for g in groups:
        have = set(feature_store.attr_names(g))
        names = [a for a in wanted if a in have]
        if names:
            out[g] = names
    return out


def _count(clock: Optional[StageTimes], ids: Dict, plan) -> None:
    """Adds one feature round's rows read here, from the cache and fetched to the batch's clock."""
    if clock is None:
        return
    for _, _, local, cached, remote in _row_split(ids, plan):
        clock.rows_fetched += remote
        clock.rows_cached += cached
        clock.rows_owned += local


def _row_split(ids: Dict, plan):
    """Per group of a feature round: ``(position, group, rows read here, from the cache, fetched)``."""
    for i, g in enumerate(ids):
        remote, cached = plan.remote_rows(i), plan.cached_rows(i)
        yield i, g, ids[g].numel() - remote - cached, cached, remote


def _record(stats: SamplerStats, ids: Dict, plan, out: Dict, received: Optional[int] = None) -> None:
    """Counts one feature round from its lookup plan: rows read here, from the cache, and fetched; the bytes
    received are ``received`` (the replies' tensor bytes as they travelled) when known, else the asked rows'."""
    stats.feature_requests += len(plan.requests)
    for i, g, local, cached, remote in _row_split(ids, plan):
        stats.feature_rows_remote += remote
        stats.feature_rows_cached += cached
        stats.feature_rows_local += local
        asked = plan.asked_rows(i)  # the wire carries each distinct id (and its row) once
        if received is None:
            stats.bytes_received += asked * sum(v[0].numel() * v.element_size() for v in out[g].values() if v.numel())
    if plan.requests:  # the ids asked, as they crossed (int32 where they fit: pyg_dist.rpc.wire)
        from pyg_dist.rpc import wire
        stats.bytes_sent += sum(wire.nbytes(r) for r in plan.requests.values())
    if received is not None:
        stats.bytes_received += received


async def fetch_features_async(feature_store, node: Dict[NodeType, Tensor], edge: Dict[EdgeType, Tensor],
                               node_attrs: Dict[NodeType, Sequence[str]],
                               edge_attrs: Dict[EdgeType, Sequence[str]],
                               stats: Optional[SamplerStats] = None, remote_rows: str = "exact",
                               device_index=None) -> FeatureBatch:
    """Rows of the batch's nodes and edges, in the order of ``node[t]`` / ``edge[et]``.

    Args:
        feature_store: This process's :class:`~pyg_dist.store.LocalFeatureStore`.
        node: Typed global ids of the batch's nodes (its output node lists).
        edge: Typed global ids of the batch's edges.
        node_attrs: Per node type, the attributes to fetch (from :func:`attrs_per_group`).
        edge_attrs: Per edge type, the attributes to fetch (from :func:`attrs_per_group`).
        stats: Counters to update, or ``None``.
        remote_rows: Wire format of the rows other partitions send: ``"exact"`` or ``"int8"`` (quantised
            floating feature rows, within the bound of :mod:`pyg_dist.store.quant`; local and cached rows exact).
        device_index: A :class:`~pyg_dist.cache.device.DeviceRowIndex`: node types whose attributes it
            holds are looked up for the ids it does not hold only; they arrive in ``FeatureBatch.device``.
    """
    ids: Dict[Union[NodeType, EdgeType], Tensor] = {t: v for t, v in node.items() if t in node_attrs}
    ids.update({et: v for et, v in edge.items() if et in edge_attrs and v is not None})
    names = {g: list(node_attrs[g]) if isinstance(g, str) else list(edge_attrs[g]) for g in ids}
    on_device = _split_device(device_index, ids, names)
    if not ids:
        return FeatureBatch(device=on_device)
    with timed("rows_local"):  # remote requests issued first, then the local and cached rows gathered
        fut = feature_store.lookup_many_async(ids, names, **({} if remote_rows == "exact" else
                                                             {"remote_rows": remote_rows}))
    with timed("rows_remote"):
        out = await fut
    if fut.plan is not None:
        _count(current(), ids, fut.plan)
    if stats is not None and fut.plan is not None:
        _record(stats, ids, fut.plan, out, getattr(fut, "received_bytes", None))
    for t, rows in on_device.items():
        rows.host = out.pop(t, {})
    return FeatureBatch(node={g: v for g, v in out.items() if isinstance(g, str)},
                        edge={g: v for g, v in out.items() if not isinstance(g, str)}, device=on_device)


def _split_device(index, ids: Dict, names: Dict) -> Dict:
    """Per node type the device cache serves: its ``DeviceRows``; ``ids`` keep only the ids it does not hold
    (a type with none left is not looked up at all)."""
    if index is None:
        return {}
    out = {}
    for g in [g for g in ids if index.covers(g, names[g])]:
        out[g] = plan = index.split(g, ids[g])
        if plan.miss_pos.numel():
            ids[g] = ids[g].index_select(0, plan.miss_pos)
        else:
            del ids[g]
    return out


__all__ = ["fetch_features_async", "attrs_per_group", "DEFAULT_NODE_ATTRS", "DEFAULT_EDGE_ATTRS"]
