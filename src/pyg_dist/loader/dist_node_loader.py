"""``DistNeighborLoader``: PyG's ``NeighborLoader`` over a partitioned graph, one rank per partition
(or several).

Seeds are co-located: each rank trains on the seeds its partition owns (split between the ranks of a
partition, by the folder's two-level sub-parts when it has them), then :func:`balance_seeds` gives
every rank the same number of batches per epoch with every seed used exactly once (one collective
at construction: build the loaders in the same order on every rank).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.loader import NodeLoader

from pyg_dist._types import HOMO_NODE
from pyg_dist.errors import InvalidArgumentError, check_choice
from pyg_dist.loader import _checks, dist_base, workers
from pyg_dist.loader.batch import handed_on, node_batch
from pyg_dist.loader.epoch import node_collate, split_keyed
from pyg_dist.loader.pipeline import DistPipelineLoader
from pyg_dist.loader.seed_split import SeedShare, balance_seeds, share_index

_WHERE = "DistNeighborLoader"
#: ``seed_split`` values: co-located and balanced, co-located only, or the rank's own seeds (PyG's
#: ``torch_geometric.distributed`` semantics: no ownership filter), balanced.
SEED_SPLITS = ("balanced", "partition", "rank")


def _node_input(where: str, meta, input_nodes: Any) -> Tuple[str, Any]:
    """``(typed node type, spec)`` where spec is ``None`` (all owned), a mask name or a tensor."""
    if not meta.is_hetero:
        return HOMO_NODE, input_nodes
    if isinstance(input_nodes, str) and input_nodes in meta.node_types:
        return input_nodes, None
    if isinstance(input_nodes, (list, tuple)) and len(input_nodes) == 2 and input_nodes[0] in meta.node_types:
        return input_nodes[0], input_nodes[1]
    raise InvalidArgumentError(where, "input_nodes", input_nodes,
                               f"a node type in {meta.node_types} or a (node_type, ids / mask / mask name) pair")


def owned_node_seeds(where: str, fs, gs, ntype: str, spec: Any, input_time: Optional[Tensor],
                     owned_only: bool = True) -> Dict[str, Tensor]:
    """This partition's seeds: ``{"node", "input_id"[, "time"]}`` (global ids; PyG's ``input_id``).

    ``spec``: ``None`` (every owned node), an attribute name (``"train_mask"``), or the GLOBAL seed
    set as ids or a bool mask (the same on every rank; each keeps the ids its partition owns).
    ``owned_only=False``: a tensor ``spec`` is this rank's own seed list, kept whole, and ``None`` means
    every node of the type (PyG's ``torch_geometric.distributed`` semantics).
    """
    meta, part, book = gs.partition_meta, gs.partition, gs.book
    group = ntype if meta.is_hetero else None
    if spec is None and not owned_only:
        spec = torch.arange(meta.num_nodes[ntype])
    if spec is None or isinstance(spec, str):
        if input_time is not None:
            raise InvalidArgumentError(where, "input_time", "<tensor>",
                                       "None unless input_nodes is a tensor (times align with it)")
        ids = fs.get_global_id(group, mask=spec) if isinstance(spec, str) else fs.get_global_id(group)
        return {"node": ids, "input_id": ids.clone()}
    num = meta.num_nodes[ntype]
    if not isinstance(spec, Tensor) or spec.dim() != 1:
        raise InvalidArgumentError(where, "input_nodes", spec, "None, a mask attribute name, or a 1-D tensor")
    _checks._check_ids(where, "input_nodes", spec, num, repr(ntype))
    if spec.dtype == torch.bool:
        ids = spec.nonzero().view(-1)
        input_id = ids
    else:
        ids, input_id = spec.to(torch.long), torch.arange(spec.numel())
    _checks.check_aligned(where, "input_time", input_time, ids.numel())
    if owned_only:
        keep = book.owner(ntype, ids) == part if ids.numel() else torch.zeros(0, dtype=torch.bool)
    else:
        keep = torch.ones(ids.numel(), dtype=torch.bool)
    out = {"node": ids[keep], "input_id": input_id[keep]}
    if input_time is not None:
        out["time"] = input_time[keep]
    return out


def rank_seeds(where: str, items: Dict[str, Tensor], key: str, ctx, meta, ntype: str, batch_size: int,
               drop_last: bool, seed_split: str, shuffle_seed: Optional[int]) -> SeedShare:
    """This rank's share of its partition's ``items``, balanced across ranks when asked."""
    check_choice(where, "seed_split", seed_split, SEED_SPLITS)
    if seed_split != "rank":  # co-located seeds: split between the ranks serving this partition
        share, shares, bounds = dist_base.rank_share_args(ctx, meta, ntype)
        pos = share_index(items[key], share, shares, bounds)
        items = {k: v[pos] for k, v in items.items()}
    if seed_split in ("balanced", "rank"):
        return balance_seeds(items, batch_size, drop_last, shuffle_seed=shuffle_seed, what=f"{where} seeds")
    from pyg_dist.loader.seed_split import BalancePlan
    n = items[key].numel()
    batches = n // batch_size if drop_last else -(-n // batch_size)
    return SeedShare(items, batches, BalancePlan(batches, (n,), (n,), (), (0,)), agreed=False)


class DistNeighborLoader(NodeLoader, DistPipelineLoader):
    """Mini-batches of sampled neighbourhoods over a partitioned graph (PyG ``NeighborLoader`` API).

    Args:
        data: A :class:`~pyg_dist.train.session.DistEnv` (from :func:`~pyg_dist.train.session.dist_session`) or PyG's
            ``(feature_store, graph_store)`` pair of this rank's partition.
        num_neighbors: Fanout per hop (``-1`` = all), or a dict per edge type.
        input_nodes: ``None`` (all nodes; a node type for hetero), an attribute name such as
            ``"train_mask"``, or the GLOBAL seed ids / bool mask (same tensor on every rank; each
            rank keeps the seeds its partition owns). Hetero: ``(node_type, any of those)``.
        input_time: Seed times aligned with a tensor ``input_nodes`` (temporal sampling).
        replace, subgraph_type, disjoint, temporal_strategy, time_attr, weight_attr, directed: As PyG's
            (``time_attr``: ``"time"`` for node time, ``"edge_time"`` for edge time;
            ``weight_attr``: ``"edge_weight"``).
        transform / transform_sampler_output / filter_per_worker: As PyG's.
        is_sorted: Accepted for PyG compatibility; partitions are always sorted.
        neighbor_sampler: A ready :class:`~pyg_dist.sampler.dist_neighbor.DistNeighborSampler`.
        ctx: This process's context (default: from ``data`` or torchrun's environment).
        seed_split: ``"balanced"`` (equal batch counts on every rank, collective; default),
            ``"partition"`` (this rank's co-located share only, no collective; e.g. evaluation) or
            ``"rank"`` (``input_nodes`` are this rank's OWN seeds, owned or not, as in PyG's
            ``torch_geometric.distributed``; ``None`` = every node; then balanced like ``"balanced"``).
        shuffle_seed: Seed of the permutation that picks which seeds move or are left out.
        seed: The loader's seed: batch ``i`` of epoch ``e`` on rank ``r`` is a pure function of
            ``(seed, e, i, r)`` and the folder, whatever ``num_workers`` or ``concurrency`` are
            (:mod:`pyg_dist.loader.epoch`). Default: drawn from torch's global generator now.
        concurrency / node_attrs / edge_attrs / timeout: Passed to the sampler.
        rpc_port: Rendezvous port of this loader's worker RPC world (``num_workers > 0``; default
            ``ctx.rpc_port + loader index``, or a free port when that one is taken).
        feature_dtype: The dtype batches carry their features in (floating attributes except ``y``,
            ``edge_label``, ``edge_weight`` and times: :mod:`pyg_dist.format.precision`): ``torch.float32``,
            ``torch.bfloat16``, ``torch.float16``, ``torch.float64`` or a name; ``None`` keeps the folder's
            stored dtype. Rows travel and are cached in the stored dtype and are cast once per batch, where it
            is built (``filter_fn``). Default ``"auto"``: the ``TrainConfig.feature_dtype`` of a ``DistEnv``
            ``data`` (``float32`` unless set), else ``float32``.
        remote_rows: How feature rows of other partitions travel: ``"exact"`` or ``"int8"`` (quantised, within
            ``scale / 2`` plus float32 rounding per element: :mod:`pyg_dist.store.quant`); passed to the sampler.
            Default ``"auto"``: the ``TrainConfig.remote_rows`` of a ``DistEnv`` ``data``, else ``"exact"``.
        device: Where batches arrive (:mod:`pyg_dist.loader.device`): ``None`` / ``"cpu"`` (host batches), or a
            CUDA device (pinned host memory, copied on a side stream one batch ahead of the step). Default
            ``"auto"``: the ``device`` of a ``DistEnv`` ``data`` (``dist_session``'s; ``cuda:LOCAL_RANK`` with
            CUDA), else ``None``. ``"cuda"`` without CUDA is an ``InvalidArgumentError``.
        gpu_cache: A :class:`~pyg_dist.cache.device.DeviceFeatureCache` on ``device``: the node rows it
            holds are neither gathered on the host nor copied per batch. Default ``"auto"``: the
            ``DistEnv``'s (``TrainConfig.gpu_cache_bytes``) when on the loader's device, else ``None``.
        **kwargs: ``DataLoader`` arguments (``batch_size``, ``shuffle``, ``drop_last``,
            ``num_workers``: workers join RPC and are kept alive, ``persistent_workers`` must not be
            ``False``).

    Example:
        >>> with dist_session(TrainConfig("/tmp/demo-2")) as env:                 # doctest: +SKIP
        ...     loader = DistNeighborLoader(env, [10, 5], input_nodes="train_mask", batch_size=256)
        ...     for batch in loader:          # Data with x, y, edge_index, n_id, e_id, batch_size
        ...         out = model(batch.x, batch.edge_index)[:batch.batch_size]
    """

    def __init__(self, data: Any, num_neighbors: Union[List[int], Dict[Any, List[int]]],
                 input_nodes: Any = None, input_time: Optional[Tensor] = None, replace: bool = False,
                 subgraph_type: str = "directional", disjoint: bool = False, temporal_strategy: str = "uniform",
                 time_attr: Optional[str] = None, weight_attr: Optional[str] = None,
                 transform: Optional[Callable] = None, transform_sampler_output: Optional[Callable] = None,
                 is_sorted: bool = False, filter_per_worker: Optional[bool] = None, neighbor_sampler: Any = None,
                 directed: bool = True, *, ctx=None, seed_split: str = "balanced", shuffle_seed: Optional[int] = 0,
                 seed: Optional[int] = None, concurrency: int = 1, node_attrs=None, edge_attrs=None,
                 timeout: Optional[float] = None, rpc_port: Optional[int] = None,
                 feature_dtype: Optional[Union[str, torch.dtype]] = dist_base.FROM_CONFIG,
                 remote_rows: str = dist_base.FROM_CONFIG, device: Any = dist_base.FROM_CONFIG,
                 gpu_cache: Any = dist_base.FROM_CONFIG, **kwargs):
        _checks.check_time_args(_WHERE, "input_time", input_time, time_attr, both=False)
        fs, gs, ctx = dist_base.begin(self, _WHERE, data, ctx, seed, kwargs, feature_dtype)
        meta = gs.partition_meta
        ntype, spec = _node_input(_WHERE, meta, input_nodes)
        items = owned_node_seeds(_WHERE, fs, gs, ntype, spec, input_time, owned_only=seed_split != "rank")
        batch_size = kwargs.get("batch_size", 1) or 1
        self.seed_share = rank_seeds(_WHERE, items, "node", ctx, meta, ntype, batch_size,
                                     bool(kwargs.get("drop_last", False)), seed_split, shuffle_seed)
        dist_base.setup_env_device(self, _WHERE, data, device, gpu_cache, transform)
        neighbor_sampler = dist_base.make_sampler(_WHERE, gs, fs, num_neighbors, neighbor_sampler, locals(),
                                                  self.gpu_cache)
        mine = self.seed_share.items
        nodes = (ntype, mine["node"]) if meta.is_hetero else mine["node"]
        super().__init__(data=(fs, gs), node_sampler=neighbor_sampler, input_nodes=nodes,
                         input_time=mine.get("time"), transform=transform,
                         transform_sampler_output=transform_sampler_output, filter_per_worker=filter_per_worker,
                         input_id=mine["input_id"],
                         **workers.loader_kwargs(_WHERE, kwargs, ctx, (fs, gs), rpc_port, dist_base.rpc_choices(data),
                                                   dist_base.start_timeout(data)))

    def collate_fn(self, index):
        """Samples the index batch with its key (stage ``sample``; in a worker, or here one batch at a time)."""
        return node_collate(self, index)

    def _start_batch(self, index):
        idx, key = split_keyed(index)
        return self.node_sampler.sample_from_nodes_async(self.input_data[idx], key)

    __call__ = DistPipelineLoader.__call__  # ``loader(index)``: the plain batch (its clock kept by the loader)

    def filter_fn(self, out):
        """Builds the ``Data`` / ``HeteroData`` batch from the sample and its fetched rows (stage ``batch``)."""
        started = time.perf_counter()
        if self.transform_sampler_output:
            out = self.transform_sampler_output(out)
        data = node_batch(out, self.input_data.input_type, feature_dtype=self.feature_dtype)
        return handed_on(data, out, self.feature_dtype, self.transform, started)  # HostBatch: clock, GPU rows
