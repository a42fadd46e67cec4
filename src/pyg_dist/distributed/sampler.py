"""PyG's ``DistNeighborSampler(current_ctx, data, num_neighbors, ...)`` over pyg_dist's sampler."""
from __future__ import annotations

from typing import Optional

from pyg_dist.distributed.stores import check_stores, time_attr_of
from pyg_dist.sampler import dist_neighbor


class DistNeighborSampler(dist_neighbor.DistNeighborSampler):
    """pyg_dist's :class:`~pyg_dist.sampler.dist_neighbor.DistNeighborSampler` with PyG's constructor.

    Args:
        current_ctx: This process's :class:`~pyg_dist.distributed.DistContext` (kept as an attribute).
        data: The ``(LocalFeatureStore, LocalGraphStore)`` pair of this process's partition.
        num_neighbors, replace, subgraph_type, disjoint, temporal_strategy, time_attr, concurrency: As PyG's
            (``time_attr="time"`` selects edge time when only edges carry time).
        channel: Accepted for PyG scripts and unused: batches are awaited, not queued.
        device: Accepted and unused, as in PyG (batches are built on the CPU).
        **kwargs: pyg_dist's sampler options (``node_attrs``, ``edge_attrs``, ``timeout``, ``backend``...).

    Sampler outputs carry pyg_dist's metadata (``metadata.features``) rather than PyG's positional tuple.
    """

    def __init__(self, current_ctx, data, num_neighbors, channel=None, replace: bool = False,
                 subgraph_type: str = "directional", disjoint: bool = False, temporal_strategy: str = "uniform",
                 time_attr: Optional[str] = None, concurrency: int = 1, device=None, **kwargs):
        fs, gs = check_stores("DistNeighborSampler", data)
        super().__init__(gs, fs, num_neighbors, replace=replace, subgraph_type=subgraph_type, disjoint=disjoint,
                         temporal_strategy=temporal_strategy, time_attr=time_attr_of(gs, time_attr),
                         concurrency=concurrency, **kwargs)
        self.current_ctx, self.channel, self.device = current_ctx, channel, device

    def init_sampler_instance(self) -> None:
        """Kept for PyG scripts: the sampler is ready when constructed."""

    def init_event_loop(self) -> None:
        """Kept for PyG scripts: pyg_dist's event loop starts with the RPC world."""

    def register_sampler_rpc(self) -> None:
        """Serves this partition to the peers (one-hop sampling and feature lookups); before ``init_rpc``."""
        dist_neighbor.serve_partition(self.graph_store, self.feature_store)


__all__ = ["DistNeighborSampler"]
