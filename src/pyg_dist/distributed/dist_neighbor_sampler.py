"""PyG's ``DistNeighborSampler(current_ctx, data, num_neighbors, ...)`` over pyg_dist's sampler."""
from __future__ import annotations

from typing import Optional

from pyg_dist.distributed.stores import check_stores, time_attr_of
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.sampler import dist_neighbor

#: Keyword arguments PyG's scripts pass that PyG's sampler ignored too (taken and dropped).
IGNORED_KWARGS = ("shuffle", "rpc_worker_names")


class DistNeighborSampler(dist_neighbor.DistNeighborSampler):
    """pyg_dist's :class:`~pyg_dist.sampler.dist_neighbor.DistNeighborSampler` with PyG's constructor.

    Args:
        current_ctx: This process's :class:`~pyg_dist.distributed.DistContext` (kept as an attribute).
        data: The ``(LocalFeatureStore, LocalGraphStore)`` pair of this process's partition: opened from a
            folder, or filled in memory (their partition is built here, from both).
        num_neighbors, replace, subgraph_type, disjoint, temporal_strategy, time_attr, concurrency: As PyG's
            (``time_attr="time"`` selects edge time when only edges carry time).
        channel: Accepted for PyG scripts and unused: batches are awaited, not queued.
        device: Accepted and unused, as in PyG (batches are built on the CPU).
        **kwargs: pyg_dist's sampler options (``node_attrs``, ``edge_attrs``, ``timeout``, ``backend``...);
            PyG's ignored ``shuffle`` and ``rpc_worker_names`` are accepted and dropped.

    Sampler outputs carry pyg_dist's metadata (``metadata.features``) rather than PyG's positional tuple.

    Example (PyG's order; every rank runs it)::

        sampler = DistNeighborSampler(ctx, (feature_store, graph_store), num_neighbors=[-1, -1])
        init_rpc(ctx, "127.0.0.1", port)            # pyg_dist.distributed.rpc
        sampler.register_sampler_rpc()
        out = sampler.sample_from_nodes(NodeSamplerInput(None, torch.tensor([1, 6])))
    """

    def __init__(self, current_ctx, data, num_neighbors, channel=None, replace: bool = False,
                 subgraph_type: str = "directional", disjoint: bool = False, temporal_strategy: str = "uniform",
                 time_attr: Optional[str] = None, concurrency: int = 1, device=None, **kwargs):
        for name in IGNORED_KWARGS:
            kwargs.pop(name, None)
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
        """Serves this partition to the peers (one-hop sampling and feature lookups).

        Before ``init_rpc`` (pyg_dist's order) it registers the callees; after it (PyG's order) it also waits
        until every rank has registered, so that no peer asks before this one answers.

        Raises:
            InvalidArgumentError: the RPC world serves another partition than the stores' (each rank must
                hold the partition of its rank).
        """
        from pyg_dist import rpc
        from pyg_dist.distributed.rpc import global_barrier
        dist_neighbor.serve_partition(self.graph_store, self.feature_store)
        if not rpc.is_initialized():
            return
        ctx = rpc.current_context()
        mine = (self.graph_store.partition, self.graph_store.partition_meta.num_parts)
        if (ctx.partition, ctx.num_partitions) != mine:
            raise InvalidArgumentError("DistNeighborSampler.register_sampler_rpc", "data", f"partition {mine[0]} of "
                                       f"{mine[1]}",
                                       f"partition {ctx.partition} of {ctx.num_partitions}: the one this rank serves "
                                       "in its RPC world")
        global_barrier()


def adopt(sampler, current_ctx, channel=None, device=None):
    """A loader's own pyg_dist sampler as PyG's class (PyG's ``loader.dist_sampler``): the same object, with
    PyG's attributes; a sampler of any other class (given by the user) is returned as it is."""
    if type(sampler) is dist_neighbor.DistNeighborSampler:
        sampler.__class__ = DistNeighborSampler  # adds methods and the three attributes below, no other state
        sampler.current_ctx, sampler.channel, sampler.device = current_ctx, channel, device
    return sampler


__all__ = ["DistNeighborSampler", "IGNORED_KWARGS", "adopt"]
