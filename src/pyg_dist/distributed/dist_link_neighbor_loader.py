"""PyG's ``DistLinkNeighborLoader`` (``torch_geometric.distributed.dist_link_neighbor_loader``) over
pyg_dist's :class:`~pyg_dist.loader.dist_link_loader.DistLinkNeighborLoader` (see
:mod:`pyg_dist.distributed.dist_loader`)."""
from __future__ import annotations

from typing import Callable, Optional

from pyg_dist.distributed.dist_loader import DistLoader, begin_loader, end_loader
from pyg_dist.distributed.stores import time_attr_of
from pyg_dist.loader import dist_link_loader
from pyg_dist.loader._checks import check_time_args


class DistLinkNeighborLoader(dist_link_loader.DistLinkNeighborLoader, DistLoader):
    """PyG's ``DistLinkNeighborLoader(data, num_neighbors, master_addr, master_port, current_ctx, ...)``.

    Arguments as PyG's (``edge_label_index`` is this rank's own seed edges, ``edge_label``,
    ``edge_label_time``, ``neg_sampling``, ``neg_sampling_ratio`` ...) and as
    :class:`DistNeighborLoader` for the rest.
    """

    def __init__(self, data, num_neighbors, master_addr: Optional[str], master_port, current_ctx,
                 edge_label_index=None, edge_label=None, edge_label_time=None, dist_sampler=None,
                 replace: bool = False, subgraph_type: str = "directional", disjoint: bool = False,
                 temporal_strategy: str = "uniform", neg_sampling=None, neg_sampling_ratio=None,
                 time_attr: Optional[str] = None, transform: Optional[Callable] = None, concurrency: int = 1,
                 num_rpc_threads: int = 16, filter_per_worker: Optional[bool] = False, async_sampling: bool = True,
                 device=None, **kwargs):
        check_time_args(type(self).__name__, "edge_label_time", edge_label_time, time_attr, both=True)  # PyG's rule
        fs, gs, extra = begin_loader(self, data, current_ctx, master_addr, master_port, num_rpc_threads, dist_sampler,
                               async_sampling, kwargs)
        super().__init__((fs, gs), num_neighbors, edge_label_index=edge_label_index, edge_label=edge_label,
                         edge_label_time=edge_label_time, replace=replace, subgraph_type=subgraph_type,
                         disjoint=disjoint, temporal_strategy=temporal_strategy, neg_sampling=neg_sampling,
                         neg_sampling_ratio=neg_sampling_ratio, time_attr=time_attr_of(gs, time_attr),
                         filter_per_worker=filter_per_worker, concurrency=concurrency, **extra, **kwargs)
        end_loader(self, fs, transform, device)

    def __repr__(self) -> str:
        return DistLoader.__repr__(self)


__all__ = ["DistLinkNeighborLoader"]
