"""PyG's ``DistNeighborLoader`` (``torch_geometric.distributed.dist_neighbor_loader``) over pyg_dist's
:class:`~pyg_dist.loader.dist_node_loader.DistNeighborLoader` (see :mod:`pyg_dist.distributed.dist_loader`)."""
from __future__ import annotations

from typing import Callable, Optional

from pyg_dist.distributed.dist_loader import DistLoader, begin_loader, end_loader
from pyg_dist.distributed.stores import time_attr_of
from pyg_dist.loader import dist_node_loader


class DistNeighborLoader(dist_node_loader.DistNeighborLoader, DistLoader):
    """PyG's ``DistNeighborLoader(data, num_neighbors, master_addr, master_port, current_ctx, ...)``.

    Arguments as PyG's: ``input_nodes`` are this rank's own seeds (any partition's; ``None`` = every
    node), ``input_time``, ``dist_sampler``, ``replace``, ``subgraph_type``, ``disjoint``,
    ``temporal_strategy``, ``time_attr``, ``transform``, ``concurrency``, ``num_rpc_threads``,
    ``filter_per_worker``; ``async_sampling`` and ``device`` are accepted (batches are always prefetched
    and built on the CPU, as PyG's). Everything else goes to pyg_dist's loader and ``DataLoader``
    (``batch_size``, ``shuffle``, ``drop_last``, ``num_workers``, ``seed``, ``rpc_timeout`` ...).
    """

    def __init__(self, data, num_neighbors, master_addr: Optional[str], master_port, current_ctx,
                 input_nodes=None, input_time=None, dist_sampler=None, replace: bool = False,
                 subgraph_type: str = "directional", disjoint: bool = False, temporal_strategy: str = "uniform",
                 time_attr: Optional[str] = None, transform: Optional[Callable] = None, concurrency: int = 1,
                 num_rpc_threads: int = 16, filter_per_worker: Optional[bool] = False, async_sampling: bool = True,
                 device=None, **kwargs):
        fs, gs, extra = begin_loader(self, data, current_ctx, master_addr, master_port, num_rpc_threads, dist_sampler,
                               async_sampling, kwargs)
        super().__init__((fs, gs), num_neighbors, input_nodes=input_nodes, input_time=input_time, replace=replace,
                         subgraph_type=subgraph_type, disjoint=disjoint, temporal_strategy=temporal_strategy,
                         time_attr=time_attr_of(gs, time_attr), filter_per_worker=filter_per_worker,
                         concurrency=concurrency, **extra, **kwargs)
        end_loader(self, fs, transform, device)

    def __repr__(self) -> str:
        return DistLoader.__repr__(self)


__all__ = ["DistNeighborLoader"]
