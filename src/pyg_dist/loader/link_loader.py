"""``LinkNeighborLoader``: PyG's link-level neighbour loader, driven by pyg_dist's own sampler.

It subclasses PyG's ``LinkLoader`` and takes the arguments of
``torch_geometric.loader.LinkNeighborLoader`` (plus ``filter_false_negatives``), so an existing script
works by changing its import. Negative sampling and the link metadata come from
:mod:`pyg_dist.sampler.links`; PyG's ``filter_fn`` builds the batches.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.loader import LinkLoader
from torch_geometric.sampler import NegativeSampling

from pyg_dist._types import EdgeType
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.loader import _checks
from pyg_dist.loader.device import setup_device
from pyg_dist.loader.epoch import link_collate
from pyg_dist.loader.node_loader import begin, make_local_sampler
from pyg_dist.loader.pipeline import PipelineLoader
from pyg_dist.loader.store_batch import pair_batch, pair_link_batch
from pyg_dist.sampler.links import FilteredNegativeSampling, edge_keys
from pyg_dist.sampler.store_pair import is_store_pair, pair_coo, pair_view

_WHERE = "LinkNeighborLoader"


def resolve_neg_sampling(neg_sampling: Any, neg_sampling_ratio: Any) -> Optional[NegativeSampling]:
    """PyG's ``neg_sampling`` / deprecated ``neg_sampling_ratio`` pair as one ``NegativeSampling``."""
    if neg_sampling_ratio is not None and neg_sampling_ratio != 0.0:
        if not isinstance(neg_sampling_ratio, (int, float)) or isinstance(neg_sampling_ratio, bool) \
                or neg_sampling_ratio < 0:
            raise InvalidArgumentError(_WHERE, "neg_sampling_ratio", neg_sampling_ratio,
                                       "None or a non-negative number")
        neg_sampling = NegativeSampling("binary", neg_sampling_ratio)
    if neg_sampling is None or isinstance(neg_sampling, NegativeSampling):
        return neg_sampling
    try:
        if isinstance(neg_sampling, str):
            return NegativeSampling(neg_sampling)
        return NegativeSampling.cast(neg_sampling)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(_WHERE, "neg_sampling", neg_sampling,
                                   f"a NegativeSampling, 'binary', 'triplet', or its dict ({exc})") from None


def _graph_edges(data: Any, edge_type: EdgeType) -> Tensor:
    """The ``[2, E]`` edges of ``edge_type`` in ``data`` (none when the graph has no such edges)."""
    none = torch.empty(2, 0, dtype=torch.long)
    if is_store_pair(data):
        view = pair_view(_WHERE, data)
        return pair_coo(data, edge_type, view)[0] if edge_type in view.edge_types else none
    store = data if isinstance(data, Data) else (data[edge_type] if edge_type in data.edge_types else {})
    return store["edge_index"] if "edge_index" in store else none


def _filtered(neg: NegativeSampling, data: Any, edge_type: EdgeType, index: Tensor,
              counts: Dict[str, int]) -> FilteredNegativeSampling:
    """Wraps ``neg`` so negatives that are graph edges or supervision edges get redrawn."""
    graph = _graph_edges(data, edge_type)
    num_dst = counts[edge_type[-1]]
    keys = edge_keys(torch.cat([graph[0], index[0]]), torch.cat([graph[1], index[1]]), num_dst)
    return FilteredNegativeSampling(neg.mode, neg.amount, neg.src_weight, neg.dst_weight,
                                    known_keys=keys, num_dst=num_dst)


def _check_neg(neg: Optional[NegativeSampling], edge_label: Any, edge_type: EdgeType,
               counts: Dict[str, int], filter_false_negatives: Any) -> None:
    if not isinstance(filter_false_negatives, bool):
        raise InvalidArgumentError(_WHERE, "filter_false_negatives", filter_false_negatives, "a bool")
    if filter_false_negatives and neg is None:
        raise InvalidArgumentError(_WHERE, "filter_false_negatives", True,
                                   "False unless neg_sampling is set")
    if neg is None:
        return
    if neg.is_triplet() and edge_label is not None:
        raise InvalidArgumentError(_WHERE, "edge_label", "<tensor>",
                                   "None with triplet negative sampling (use src_index / dst_pos_index / "
                                   "dst_neg_index of the batch): 'edge_label' needs to be undefined for "
                                   "'triplet'-based negative sampling")
    for name, weight, ntype in (("src_weight", neg.src_weight, edge_type[0]),
                                ("dst_weight", neg.dst_weight, edge_type[-1])):
        num = counts.get(ntype)
        if weight is not None and num is not None and weight.numel() != num:
            raise InvalidArgumentError(_WHERE, f"neg_sampling.{name}", tuple(weight.shape),
                                       f"{num} weights (one per {ntype!r} node)")


class LinkNeighborLoader(LinkLoader, PipelineLoader):
    """Mini-batches of sampled neighbourhoods around seed edges (PyG's ``LinkNeighborLoader``).

    Args:
        data: A ``Data``, a ``HeteroData`` or any PyG ``(FeatureStore, GraphStore)`` pair (as in
            :class:`~pyg_dist.loader.node_loader.NeighborLoader`), or anything ``neighbor_sampler`` understands.
            A graph without edges works (zero hops, or hops that find nothing): batches hold the label
            edges' endpoints.
        num_neighbors: Neighbours per hop (a dict per edge type for heterogeneous graphs).
        edge_label_index: Seed edges ``[2, E]``; ``None`` takes every edge. For heterogeneous data an
            edge type or ``(edge_type, [2, E] tensor)`` (with the tensor, the edge type need not be one the
            graph holds: its node types must exist).
        edge_label: Per-edge labels. With binary negatives, labels starting at ``0`` are shifted by
            ``+1`` so that ``0`` means negative (PyG's rule); generated labels are float ones/zeros.
        edge_label_time: Per-edge seed times (needs ``time_attr``); neighbours are never newer.
        replace: Sample with replacement.
        subgraph_type: ``"directional"``, ``"bidirectional"`` or ``"induced"``.
        disjoint: Give every endpoint its own subgraph (forced by temporal sampling).
        temporal_strategy: ``"uniform"`` or ``"last"``.
        neg_sampling: ``NegativeSampling("binary" | "triplet", amount)`` (or its str/dict form).
        neg_sampling_ratio: Deprecated: binary negatives with this ratio.
        time_attr: Name of the node (or edge) time attribute.
        weight_attr: Name of the edge weight attribute.
        transform: Applied to every batch.
        transform_sampler_output: Applied to every ``SamplerOutput``.
        is_sorted: Whether ``edge_index`` is already sorted by column.
        filter_per_worker: Build batches inside the workers (default as in
            :class:`~pyg_dist.loader.node_loader.NeighborLoader`).
        neighbor_sampler: A ready sampler; the sampling arguments above are then ignored.
        directed: Deprecated PyG argument, passed through.
        filter_false_negatives: Redraw negatives that are edges of the graph or of
            ``edge_label_index`` (off by default, like PyG).
        seed: The loader's seed (pyg_dist only), as in :class:`~pyg_dist.loader.node_loader.NeighborLoader`.
        device: pyg_dist only: where batches arrive, as in :class:`~pyg_dist.loader.node_loader.NeighborLoader`.
        **kwargs: ``torch.utils.data.DataLoader`` arguments.

    Example:
        >>> import pyg_dist
        >>> from torch_geometric.sampler import NegativeSampling
        >>> data = pyg_dist.synthetic_graph(500, 6, num_features=8)
        >>> loader = pyg_dist.LinkNeighborLoader(data, [5, 3], batch_size=32,
        ...                                      neg_sampling=NegativeSampling("binary", 2))
        >>> batch = next(iter(loader))
        >>> batch.edge_label_index.shape, int(batch.edge_label.sum())
        (torch.Size([2, 96]), 32)
    """

    def __init__(self, data: Any, num_neighbors: Union[List[int], Dict[Any, List[int]]],
                 edge_label_index: Any = None, edge_label: Optional[Tensor] = None,
                 edge_label_time: Optional[Tensor] = None, replace: bool = False,
                 subgraph_type: str = "directional", disjoint: bool = False,
                 temporal_strategy: str = "uniform", neg_sampling: Any = None,
                 neg_sampling_ratio: Optional[Union[int, float]] = None, time_attr: Optional[str] = None,
                 weight_attr: Optional[str] = None, transform: Optional[Callable] = None,
                 transform_sampler_output: Optional[Callable] = None, is_sorted: bool = False,
                 filter_per_worker: Optional[bool] = None, neighbor_sampler: Any = None,
                 directed: bool = True, filter_false_negatives: bool = False, seed: Optional[int] = None,
                 device: Any = None, **kwargs):
        filter_per_worker = begin(self, _WHERE, locals())
        setup_device(self, _WHERE, device)
        edge_type, index = _checks.edge_label_input(_WHERE, data, edge_label_index)
        num_edges = index.size(1) if index is not None else None
        if num_edges is not None:
            _checks.check_aligned(_WHERE, "edge_label", edge_label, num_edges)
            _checks.check_aligned(_WHERE, "edge_label_time", edge_label_time, num_edges)
        _checks.check_time_args(_WHERE, "edge_label_time", edge_label_time, time_attr, both=True)
        neg = resolve_neg_sampling(neg_sampling, neg_sampling_ratio)
        counts = _checks.node_counts(data)
        _check_neg(neg, edge_label, edge_type, counts, filter_false_negatives)
        if filter_false_negatives:
            if index is None:  # neither in memory nor a store pair: the graph's edges are unknown here
                raise InvalidArgumentError(_WHERE, "filter_false_negatives", True,
                                           "False unless data is a Data, HeteroData or store pair")
            neg = _filtered(neg, data, edge_type, index, counts)
        neighbor_sampler = make_local_sampler(locals())
        if index is not None:  # resolved (PyG reads a store pair's label edges only when given)
            hetero = _checks.is_hetero(_WHERE, data)
            edge_label_index = (edge_type if hetero else None, index) if hetero or is_store_pair(data) else index
        super().__init__(data=data, link_sampler=neighbor_sampler, edge_label_index=edge_label_index,
                         edge_label=edge_label, edge_label_time=edge_label_time, neg_sampling=neg,
                         transform=transform, transform_sampler_output=transform_sampler_output,
                         filter_per_worker=filter_per_worker, **kwargs)

    def collate_fn(self, index):
        """Samples the seed edges at ``index`` (a keyed index batch) with the batch's key (stage ``sample``)."""
        return link_collate(self, index)

    def filter_fn(self, out):
        """The link batch (stage ``batch``; :func:`~pyg_dist.loader.store_batch.pair_batch`)."""
        return pair_batch(self, out, self.link_sampler, pair_link_batch, LinkLoader.filter_fn)
