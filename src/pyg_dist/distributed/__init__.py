"""Migration layer for ``torch_geometric.distributed``: PyG's names AND constructors over pyg_dist.

A script written for PyG 2.5-2.8's distributed module runs with its import changed, from the package or
from PyG's submodule paths::

    from pyg_dist.distributed import (DistContext, LocalFeatureStore, LocalGraphStore, Partitioner,
                                      DistNeighborLoader, DistLinkNeighborLoader)
    from pyg_dist.distributed.dist_neighbor_sampler import DistNeighborSampler
    from pyg_dist.distributed.rpc import init_rpc, shutdown_rpc

Submodules, as PyG's: ``dist_context``, ``local_feature_store``, ``local_graph_store``, ``partition``,
``dist_neighbor_sampler``, ``dist_loader``, ``dist_neighbor_loader``, ``dist_link_neighbor_loader``,
``rpc``. Every class is a thin adapter over pyg_dist's own (one engine): the stores ARE pyg_dist's stores
with PyG's attributes added (opened from a folder, or built empty and filled in memory), the loaders ARE
pyg_dist's loaders with PyG's argument list, and ``Partitioner`` writes PyG's folder layout (input ids kept)
with pyg_dist's METIS. See ``docs/guides/migration.md`` for every name's status and each place where PyG's
behaviour was a bug and pyg_dist does otherwise. Imported lazily (``import pyg_dist.distributed`` stays cheap).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyg_dist._lazy import lazy_names

if TYPE_CHECKING:  # visible to IDEs and type checkers; imported on first use at run time
    from pyg_dist.distributed.dist_context import DistContext, DistRole
    from pyg_dist.distributed.dist_link_neighbor_loader import DistLinkNeighborLoader
    from pyg_dist.distributed.dist_loader import DistLoader
    from pyg_dist.distributed.dist_neighbor_loader import DistNeighborLoader
    from pyg_dist.distributed.dist_neighbor_sampler import DistNeighborSampler
    from pyg_dist.distributed.local_feature_store import LocalFeatureStore
    from pyg_dist.distributed.local_graph_store import LocalGraphStore
    from pyg_dist.distributed.partition import Partitioner

_LAZY = {
    "DistContext": "pyg_dist.distributed.dist_context",
    "DistRole": "pyg_dist.distributed.dist_context",
    "LocalFeatureStore": "pyg_dist.distributed.local_feature_store",
    "LocalGraphStore": "pyg_dist.distributed.local_graph_store",
    "Partitioner": "pyg_dist.distributed.partition",
    "DistNeighborSampler": "pyg_dist.distributed.dist_neighbor_sampler",
    "DistLoader": "pyg_dist.distributed.dist_loader",
    "DistNeighborLoader": "pyg_dist.distributed.dist_neighbor_loader",
    "DistLinkNeighborLoader": "pyg_dist.distributed.dist_link_neighbor_loader",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _LAZY)
