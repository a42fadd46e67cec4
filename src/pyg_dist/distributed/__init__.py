"""``torch_geometric.distributed``'s names, for users migrating from it (a re-export, nothing else).

pyg_dist's classes live in its pipeline stages (``partition/``, ``store/``, ``sampler/``, ``loader/``);
this module only mirrors the names PyG's deprecated module exported, so ``from pyg_dist.distributed
import DistNeighborLoader`` works where ``from torch_geometric.distributed import ...`` did.
Imported lazily (``import pyg_dist.distributed`` stays cheap).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyg_dist._lazy import lazy_names

if TYPE_CHECKING:  # visible to IDEs and type checkers; imported on first use at run time
    from pyg_dist.context import DistContext
    from pyg_dist.loader.dist_link_loader import DistLinkNeighborLoader
    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.partition.partitioner import Partitioner
    from pyg_dist.sampler.dist_neighbor import DistNeighborSampler
    from pyg_dist.store.feature_store import LocalFeatureStore
    from pyg_dist.store.graph_store import LocalGraphStore

_LAZY = {
    "DistContext": "pyg_dist.context",
    "LocalFeatureStore": "pyg_dist.store.feature_store",
    "LocalGraphStore": "pyg_dist.store.graph_store",
    "Partitioner": "pyg_dist.partition.partitioner",
    "DistNeighborSampler": "pyg_dist.sampler.dist_neighbor",
    "DistNeighborLoader": "pyg_dist.loader.dist_node_loader",
    "DistLinkNeighborLoader": "pyg_dist.loader.dist_link_loader",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _LAZY)
