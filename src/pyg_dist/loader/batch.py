"""Building ``Data`` / ``HeteroData`` batches from a distributed sample and its fetched rows.

One code path: :func:`_slot` is the only place that knows a homogeneous batch is a ``Data`` (its one
node / edge type maps to the object itself). Fields follow PyG's loaders. Features arrive in the folder's
stored dtype; ``feature_dtype`` casts them once, here (:func:`pyg_dist.format.precision.batch_value`).
Node types whose rows a GPU cache holds (``FeatureBatch.device``) get no feature attributes here: the loader hands
the device stage (:mod:`pyg_dist.loader.device`) a :class:`HostBatch`, the batch with those types' plans (the host
rows of the ids the GPU does not hold), and the device stage sets the attributes on the GPU.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Dict, NamedTuple, Optional, Union

import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput

from pyg_dist._types import HOMO_EDGE, HOMO_NODE, as_typed
from pyg_dist.format.precision import batch_value
from pyg_dist.sampler.timing import StageTimes


def _slot(data: Union[Data, HeteroData], key):
    """Where a typed key's attributes live: the ``Data`` itself, or ``data[key]``."""
    return data if isinstance(data, Data) else data[key]


def graph_batch(out: Union[SamplerOutput, HeteroSamplerOutput], features=None, cls=None,
                feature_dtype: Optional[torch.dtype] = None) -> Union[Data, HeteroData]:
    """The subgraph part of a batch: edges, node and edge rows of ``features`` (default:
    ``metadata.features``; features cast to ``feature_dtype``, ``None``: as fetched), ids, counts; ``cls``:
    PyG's ``custom_cls`` (default ``Data`` / ``HeteroData``)."""
    hetero = isinstance(out, HeteroSamplerOutput)
    data = cls() if cls is not None else (HeteroData() if hetero else Data())
    node = as_typed(out.node, HOMO_NODE, hetero)
    row, col = as_typed(out.row, HOMO_EDGE, hetero), as_typed(out.col, HOMO_EDGE, hetero)
    edge = as_typed(out.edge, HOMO_EDGE, hetero) if out.edge is not None else {}
    features = getattr(out.metadata, "features", None) if features is None else features
    for t, ids in node.items():
        store = _slot(data, t)
        for name, value in (features.node.get(t, {}) if features is not None else {}).items():
            store[name] = batch_value(name, value, feature_dtype)
        store.n_id = ids
        if not hetero:
            data.num_nodes = ids.numel()
        else:
            store.num_nodes = ids.numel()
    for et in row:
        store = _slot(data, et)
        store.edge_index = torch.stack([row[et], col[et]])
        for name, value in (features.edge.get(et, {}) if features is not None else {}).items():
            store[name] = batch_value(name, value, feature_dtype)
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


class HostBatch(NamedTuple):
    """What the batch stage of a distributed loader hands on: the batch; per node type a GPU cache holds, the plan
    (:class:`~pyg_dist.cache.device.DeviceRows`) that puts those rows together on the GPU from the cache and
    the host rows it carries (``None``: no GPU cache); and the batch's clock
    (:class:`~pyg_dist.sampler.timing.StageTimes`: sampling, rows, assembly). The loader's iterator takes the clock
    (:class:`~pyg_dist.loader.pipeline.StageRecorder`) and hands the device stage, or the caller, the rest."""
    data: Union[Data, HeteroData]
    device_rows: Optional[Dict[Any, Any]]
    times: Optional[StageTimes] = None


def device_rows(out, feature_dtype: Optional[torch.dtype] = None) -> Optional[Dict[Any, Any]]:
    """The sample's plans for the node rows a GPU cache holds (host rows cast to ``feature_dtype``), or ``None``."""
    features = getattr(out.metadata, "features", None)
    if features is None or not features.device:
        return None
    return {t: dataclasses.replace(r, host={n: batch_value(n, v, feature_dtype) for n, v in r.host.items()})
            for t, r in features.device.items()}


def handed_on(data, out, feature_dtype: Optional[torch.dtype], transform, started: Optional[float] = None):
    """The batch stage's result: ``data`` (through ``transform``), or a :class:`HostBatch` when a GPU cache holds
    rows of the sample (the loaders refuse ``transform`` with a GPU cache) or the sample carries its clock
    (``metadata.times``; ``started``: ``time.perf_counter()`` when the batch stage began, its assembly seconds)."""
    rows = device_rows(out, feature_dtype)
    if rows is None and transform is not None:
        data = transform(data)
    times = getattr(out.metadata, "times", None)
    if times is not None and started is not None:
        times.assemble += time.perf_counter() - started
    if rows is not None or times is not None:
        return HostBatch(data, rows, times)
    return data


def take_clock(item, times: StageTimes):
    """What the recorder hands on for a batch stage's ``item``: a :class:`HostBatch`'s clock added to ``times``,
    then its plain batch (or, when a GPU cache holds rows, the ``HostBatch`` of those rows without the clock);
    anything else unchanged."""
    if not isinstance(item, HostBatch) or item.times is None:
        return item
    times.add(item.times)
    return item.data if item.device_rows is None else HostBatch(item.data, item.device_rows)


def node_batch(out, input_type: Optional[str], md=None, **graph) -> Union[Data, HeteroData]:
    """A node-level batch: :func:`graph_batch` (``graph``: its keyword arguments) plus ``input_id``,
    ``seed_time``, ``batch_size`` from ``md`` (default: ``out.metadata``)."""
    data = graph_batch(out, **graph)
    store = _slot(data, input_type or HOMO_NODE)
    md = out.metadata if md is None else md
    store.input_id = md.input_id
    store.seed_time = md.seed_time
    store.batch_size = md.input_id.size(0)
    return data


def link_batch(out, input_type, triplet: bool, md=None, **graph) -> Union[Data, HeteroData]:
    """A link-level batch: :func:`graph_batch` plus PyG's link metadata (binary or triplet) from ``md``
    (default: ``out.metadata``)."""
    data = graph_batch(out, **graph)
    md = out.metadata if md is None else md
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


__all__ = ["graph_batch", "node_batch", "link_batch", "HostBatch", "device_rows", "handed_on", "take_clock"]
