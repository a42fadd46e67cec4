"""``DistLinkNeighborLoader``: PyG's ``LinkNeighborLoader`` over a partitioned graph.

Seed edges are co-located with their destination: each rank takes the supervision edges whose
destination its partition owns (the partition stores those edges' in-edge lists), then the same
balancing as node seeds gives every rank equal batch counts with every seed edge used once.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Union

import torch
from torch import Tensor
from torch_geometric.loader import LinkLoader

from pyg_dist._types import HOMO_EDGE
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.loader import _checks, dist_base, workers
from pyg_dist.loader.batch import handed_on, link_batch
from pyg_dist.loader.dist_node_loader import rank_seeds
from pyg_dist.loader.epoch import link_collate, split_keyed
from pyg_dist.loader.link_loader import resolve_neg_sampling
from pyg_dist.loader.pipeline import DistPipelineLoader

_WHERE = "DistLinkNeighborLoader"


def _edge_type(meta, edge_label_index):
    """``(typed edge type, tensor or None)`` of PyG's ``edge_label_index`` forms."""
    if not meta.is_hetero:
        if isinstance(edge_label_index, (list, tuple)) and len(edge_label_index) == 2 and edge_label_index[0] is None:
            return HOMO_EDGE, edge_label_index[1]  # PyG's (None, [2, E]) form of store pairs
        return HOMO_EDGE, edge_label_index
    value = edge_label_index
    if isinstance(value, (list, tuple)) and len(value) == 3 and all(isinstance(v, str) for v in value):
        value = (tuple(value), None)
    if isinstance(value, (list, tuple)) and len(value) == 2 and tuple(value[0]) in meta.edge_types:
        return tuple(value[0]), value[1]
    raise InvalidArgumentError(_WHERE, "edge_label_index", edge_label_index,
                               f"an edge type in {meta.edge_types} or an (edge_type, [2, E] tensor) pair")


def _owned_edges(gs, et, time_attr: Optional[str]) -> Dict[str, Tensor]:
    """Every edge of ``et`` this partition owns, from its in-edge lists (global ids)."""
    g = gs.graph_part(et if gs.partition_meta.is_hetero else None)
    deg = g.colptr[1:] - g.colptr[:-1]
    dst = torch.arange(g.dst_start, g.dst_end).repeat_interleave(deg)
    keep = gs.book.owner(et, g.edge_id) == gs.partition if g.edge_id.numel() else torch.zeros(0, dtype=torch.bool)
    out = {"src": g.row[keep], "dst": dst[keep], "input_id": g.edge_id[keep]}
    if time_attr is not None:
        if g.edge_time is None:
            raise InvalidArgumentError(_WHERE, "time_attr", time_attr,
                                       f"an attribute the seed edges have (no edge_time on {et!r}); pass "
                                       "edge_label_index and edge_label_time")
        out["time"] = g.edge_time[keep]
    return out


def owned_link_seeds(gs, et, index: Optional[Tensor], edge_label: Optional[Tensor],
                     edge_label_time: Optional[Tensor], time_attr: Optional[str],
                     owned_only: bool = True) -> Dict[str, Tensor]:
    """This partition's seed edges: ``{"src", "dst", "input_id"[, "label"][, "time"]}``.

    ``owned_only=False``: a given ``index`` is this rank's own seed list, kept whole (PyG's
    ``torch_geometric.distributed`` semantics); without one, the partition's edges either way.
    """
    if index is None:
        if edge_label is not None or edge_label_time is not None:
            raise InvalidArgumentError(_WHERE, "edge_label", "<tensor>",
                                       "None unless edge_label_index is given (labels align with it)")
        return _owned_edges(gs, et, time_attr)
    meta = gs.partition_meta
    if not isinstance(index, Tensor) or index.dim() != 2 or index.size(0) != 2 or index.is_floating_point():
        raise InvalidArgumentError(_WHERE, "edge_label_index", index, "an integer tensor of shape [2, E]")
    for r, t in ((0, et[0]), (1, et[-1])):
        if index.numel() and (int(index[r].min()) < 0 or int(index[r].max()) >= meta.num_nodes[t]):
            raise InvalidArgumentError(_WHERE, "edge_label_index", index, f"{t!r} ids in [0, {meta.num_nodes[t]}) "
                                       f"in row {r}")
    _checks.check_aligned(_WHERE, "edge_label", edge_label, index.size(1))
    _checks.check_aligned(_WHERE, "edge_label_time", edge_label_time, index.size(1))
    keep = (gs.book.owner(et[-1], index[1]) == gs.partition if owned_only
            else torch.ones(index.size(1), dtype=torch.bool))
    out = {"src": index[0][keep], "dst": index[1][keep], "input_id": torch.arange(index.size(1))[keep]}
    if edge_label is not None:
        out["label"] = edge_label[keep]
    if edge_label_time is not None:
        out["time"] = edge_label_time[keep]
    return out


class DistLinkNeighborLoader(LinkLoader, DistPipelineLoader):
    """Mini-batches around seed edges over a partitioned graph (PyG ``LinkNeighborLoader`` API).

    Args:
        data: A :class:`~pyg_dist.train.session.DistEnv` or a ``(feature_store, graph_store)`` pair.
        num_neighbors: Fanout per hop, or a dict per edge type.
        edge_label_index: ``None`` (every edge; an edge type for hetero) or the GLOBAL supervision
            edges ``[2, E]`` (same on every rank; each rank keeps those whose destination it owns).
        edge_label / edge_label_time: Aligned with ``edge_label_index``. With ``time_attr`` and no
            ``edge_label_index``, seed times are the edges' ``edge_time``.
        neg_sampling / neg_sampling_ratio: PyG's binary / triplet negative sampling (negatives are
            drawn uniformly; they may coincide with positive edges, as in PyG).
        time_attr: ``"time"`` (node time) or ``"edge_time"``.
        replace, subgraph_type, disjoint, temporal_strategy, weight_attr, directed: As PyG's
            (``weight_attr``: ``"edge_weight"``).
        transform / transform_sampler_output / filter_per_worker: As PyG's.
        is_sorted: Accepted for PyG compatibility; partitions are always sorted.
        neighbor_sampler: A ready :class:`~pyg_dist.sampler.dist_neighbor.DistNeighborSampler`.
        ctx, seed_split, shuffle_seed, seed, concurrency, node_attrs, edge_attrs, timeout, rpc_port, feature_dtype:
            As :class:`~pyg_dist.loader.dist_node_loader.DistNeighborLoader` (``seed_split="rank"``:
            ``edge_label_index`` is this rank's own seed list, kept whole).
        remote_rows: As :class:`~pyg_dist.loader.dist_node_loader.DistNeighborLoader` (``"exact"``, ``"int8"``
            or ``"auto"``: the ``TrainConfig.remote_rows`` of a ``DistEnv``).
        device, gpu_cache: As :class:`~pyg_dist.loader.dist_node_loader.DistNeighborLoader` (default ``"auto"``: the
            ``DistEnv``'s device and GPU cache; batches arrive on that device).
        **kwargs: ``DataLoader`` arguments (``batch_size``, ``shuffle``, ``drop_last``, ``num_workers``).

    Example:
        >>> loader = DistLinkNeighborLoader(env, [10, 5], batch_size=128,        # doctest: +SKIP
        ...                                 neg_sampling=NegativeSampling("binary", 1))
        >>> batch = next(iter(loader)); batch.edge_label_index, batch.edge_label  # doctest: +SKIP
    """

    def __init__(self, data: Any, num_neighbors: Union[List[int], Dict[Any, List[int]]],
                 edge_label_index: Any = None, edge_label: Optional[Tensor] = None,
                 edge_label_time: Optional[Tensor] = None, replace: bool = False,
                 subgraph_type: str = "directional", disjoint: bool = False, temporal_strategy: str = "uniform",
                 neg_sampling: Any = None, neg_sampling_ratio: Optional[Union[int, float]] = None,
                 time_attr: Optional[str] = None, weight_attr: Optional[str] = None,
                 transform: Optional[Callable] = None, transform_sampler_output: Optional[Callable] = None,
                 is_sorted: bool = False, filter_per_worker: Optional[bool] = None, neighbor_sampler: Any = None,
                 directed: bool = True, *, ctx=None, seed_split: str = "balanced", shuffle_seed: Optional[int] = 0,
                 seed: Optional[int] = None, concurrency: int = 1, node_attrs=None, edge_attrs=None,
                 timeout: Optional[float] = None, rpc_port: Optional[int] = None,
                 feature_dtype: Optional[Union[str, torch.dtype]] = dist_base.FROM_CONFIG,
                 remote_rows: str = dist_base.FROM_CONFIG, device: Any = dist_base.FROM_CONFIG,
                 gpu_cache: Any = dist_base.FROM_CONFIG, **kwargs):
        _checks.check_time_args(_WHERE, "edge_label_time", edge_label_time, time_attr, both=False)
        fs, gs, ctx = dist_base.begin(self, _WHERE, data, ctx, seed, kwargs, feature_dtype)
        meta = gs.partition_meta
        et, index = _edge_type(meta, edge_label_index)
        neg = resolve_neg_sampling(neg_sampling, None if neg_sampling_ratio in (None, 0.0) else neg_sampling_ratio)
        if neg is not None and neg.is_triplet() and edge_label is not None:
            raise InvalidArgumentError(_WHERE, "edge_label", "<tensor>", "None with triplet negative sampling")
        items = owned_link_seeds(gs, et, index, edge_label, edge_label_time, time_attr, owned_only=seed_split != "rank")
        batch_size = kwargs.get("batch_size", 1) or 1
        self.seed_share = rank_seeds(_WHERE, items, "dst", ctx, meta, et[-1], batch_size,
                                     bool(kwargs.get("drop_last", False)), seed_split, shuffle_seed)
        dist_base.setup_env_device(self, _WHERE, data, device, gpu_cache, transform)
        neighbor_sampler = dist_base.make_sampler(_WHERE, gs, fs, num_neighbors, neighbor_sampler, locals(),
                                                  self.gpu_cache)
        mine = self.seed_share.items
        pairs = torch.stack([mine["src"], mine["dst"]])
        super().__init__(data=(fs, gs), link_sampler=neighbor_sampler,
                         edge_label_index=(et, pairs),  # PyG's remote-backend form, for homo too
                         edge_label=mine.get("label"), edge_label_time=mine.get("time"), neg_sampling=neg,
                         transform=transform, transform_sampler_output=transform_sampler_output,
                         filter_per_worker=filter_per_worker, input_id=mine["input_id"],
                         **workers.loader_kwargs(_WHERE, kwargs, ctx, (fs, gs), rpc_port,
                                                   dist_base.rpc_choices(data),
                                                   dist_base.start_timeout(data)))
        if not meta.is_hetero:
            self.input_data.input_type = None  # the homogeneous boundary: no edge type downstream

    def collate_fn(self, index):
        """Samples the index batch with its key (stage ``sample``; in a worker, or here one batch at a time)."""
        return link_collate(self, index)

    def _start_batch(self, index):
        idx, key = split_keyed(index)
        return self.link_sampler.sample_from_edges_async(self.input_data[idx], self.neg_sampling, key)

    __call__ = DistPipelineLoader.__call__  # ``loader(index)``: the plain batch (its clock kept by the loader)

    def filter_fn(self, out):
        """Builds the ``Data`` / ``HeteroData`` link batch from the sample and its fetched rows (stage ``batch``)."""
        started = time.perf_counter()
        if self.transform_sampler_output:
            out = self.transform_sampler_output(out)
        triplet = self.neg_sampling is not None and self.neg_sampling.is_triplet()
        data = link_batch(out, self.input_data.input_type, triplet, feature_dtype=self.feature_dtype)
        return handed_on(data, out, self.feature_dtype, self.transform, started)  # HostBatch: clock, GPU rows
