"""Stores over one partition: :class:`LocalGraphStore` (CSC by destination) and
:class:`LocalFeatureStore` (attributes; answers for any global id, fetching remote rows over RPC).

Names follow ``torch_geometric.distributed`` where the meaning matches. Typical use in every process::

    from pyg_dist import serve_partition
    from pyg_dist.context import DistContext
    from pyg_dist.rpc import rpc_session
    from pyg_dist.store import load_stores

    ctx = DistContext.from_env(num_partitions=2)
    graph, feats = load_stores("/data/products-2", ctx=ctx)   # checks the folder against the world
    serve_partition(graph, feats)                             # answer peers (before init)

(``dist_session`` does all of this for a training job.)
    with rpc_session(ctx):
        x = feats.lookup_features(torch.tensor([0, 123456]))  # local and remote rows, in order
        feats.set_cache(build_cache(graph, feats, "presample", cache_ratio=0.25, num_neighbors=[15, 10, 5]))

The caches live in one subpackage, :mod:`pyg_dist.cache`: a remote-feature cache (``rows``) keeps copies
of the remote rows batches ask for most (the partitioner can write one into the folder, ``--cache-ratio``, then
it is used with no RPC); a GPU cache (``device``) keeps a partition's hottest rows on the training GPU; both take
rows in one degree ranking (``ranking``) within a budget (``fill``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyg_dist._lazy import lazy_names

if TYPE_CHECKING:  # visible to IDEs and type checkers; imported on first use at run time
    from pyg_dist.cache.device import DeviceFeatureCache, build_device_cache
    from pyg_dist.cache.rows import FeatureCache
    from pyg_dist.store.feature_store import GlobalTensorAttr, LocalFeatureStore
    from pyg_dist.store.folder import open_partition
    from pyg_dist.store.graph_store import LocalGraphStore
    from pyg_dist.store.lookup import LOOKUP_OP, FeatureQuery, LookupFuture, LookupReply, LookupRequest
    from pyg_dist.store.open import load_stores

_LAZY = {
    # public name: the module that defines it
    "LocalGraphStore": "pyg_dist.store.graph_store",
    "LocalFeatureStore": "pyg_dist.store.feature_store",
    "GlobalTensorAttr": "pyg_dist.store.feature_store",
    "load_stores": "pyg_dist.store.open",
    "open_partition": "pyg_dist.store.folder",
    "FeatureCache": "pyg_dist.cache.rows",
    "DeviceFeatureCache": "pyg_dist.cache.device",
    "build_device_cache": "pyg_dist.cache.device",
    "LOOKUP_OP": "pyg_dist.store.lookup",
    "FeatureQuery": "pyg_dist.store.lookup",
    "LookupRequest": "pyg_dist.store.lookup",
    "LookupReply": "pyg_dist.store.lookup",
    "LookupFuture": "pyg_dist.store.lookup",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _LAZY)
