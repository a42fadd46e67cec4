"""Stores over one partition: :class:`LocalGraphStore` (CSC by destination) and
:class:`LocalFeatureStore` (attributes; answers for any global id, fetching remote rows over RPC).

Names follow ``torch_geometric.distributed`` where the meaning matches. Typical use in every process::

    from pyg_dist.context import DistContext
    from pyg_dist.rpc import rpc_session
    from pyg_dist.store import load_stores

    ctx = DistContext.from_env(num_partitions=2)
    graph, feats = load_stores("/data/products-2", ctx=ctx)   # checks the folder against the world
    feats.serve()                                             # answer peers' lookups (before init)
    with rpc_session(ctx):
        x = feats.lookup_features(torch.tensor([0, 123456]))  # local and remote rows, in order
        feats.set_cache(build_cache(graph, feats, "presample", cache_ratio=0.25, num_neighbors=[15, 10, 5]))

A remote-feature cache (:mod:`pyg_dist.store.cache`) keeps copies of the remote rows batches ask for
most; the partitioner can write one into the folder (``--cache-ratio``), then it is used with no RPC.
"""
from __future__ import annotations

from typing import Optional, Tuple

from pyg_dist.store.cache import FeatureCache
from pyg_dist.store.cache_fill import build_cache
from pyg_dist.store.feature_store import GlobalTensorAttr, LocalFeatureStore
from pyg_dist.store.folder import open_partition
from pyg_dist.store.graph_store import LocalGraphStore
from pyg_dist.store.lookup import LOOKUP_OP, FeatureQuery, LookupFuture, LookupReply, LookupRequest


def load_stores(root, part: Optional[int] = None, *, ctx=None,
                mmap: bool = True) -> Tuple[LocalGraphStore, LocalFeatureStore]:
    """Opens one partition (loaded once) as a graph store and a feature store.

    Args:
        root: A partition folder written by pyg_dist (or by PyG's ``Partitioner``).
        part: Partition index; default ``ctx.partition``.
        ctx: The process's :class:`~pyg_dist.context.DistContext`; when given, the folder must have
            ``ctx.num_partitions`` partitions.
        mmap: Memory-map the tensors (default): processes on one machine share one copy of the
            partition through the page cache, and opening is instant. ``False`` reads them into
            private memory (shared with forked children copy-on-write only).

    Raises:
        PartitionFormatError: naming the file: META.json missing or corrupt, a partition count that
            differs from the world's, any partition's file missing, sizes that disagree with META.
        InvalidArgumentError: ``part`` out of range (or missing without ``ctx``).

    Example:
        >>> graph, feats = load_stores("/tmp/demo-2", 0)          # doctest: +SKIP
        >>> feats.get_global_id(mask="train_mask")[:3]            # doctest: +SKIP
        tensor([0, 4, 9])
    """
    data = open_partition("load_stores", root, part, ctx, mmap)
    return LocalGraphStore(data, mmap=mmap), LocalFeatureStore(data, mmap=mmap)


__all__ = ["LocalGraphStore", "LocalFeatureStore", "GlobalTensorAttr", "load_stores", "FeatureCache", "build_cache",
           "LOOKUP_OP",
           "FeatureQuery", "LookupRequest", "LookupReply", "LookupFuture"]
