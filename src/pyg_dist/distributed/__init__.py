"""Migration layer for ``torch_geometric.distributed``: PyG's names AND constructors over pyg_dist.

A script written for PyG 2.5-2.8's distributed module runs with its import changed::

    from pyg_dist.distributed import (DistContext, LocalFeatureStore, LocalGraphStore, Partitioner,
                                      DistNeighborLoader, DistLinkNeighborLoader)

Every class here is a thin adapter over pyg_dist's own (one engine): the stores ARE pyg_dist's stores
with PyG's attributes added, the loaders ARE pyg_dist's loaders with PyG's argument list, and
``Partitioner`` writes PyG's folder layout (input ids kept) with pyg_dist's METIS. See
``docs/migration.md`` for every name's status and each place where PyG's behaviour was a bug and
pyg_dist does otherwise. Imported lazily (``import pyg_dist.distributed`` stays cheap).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyg_dist._lazy import lazy_names

if TYPE_CHECKING:  # visible to IDEs and type checkers; imported on first use at run time
    from pyg_dist.distributed.context import DistContext, DistRole
    from pyg_dist.distributed.loaders import DistLinkNeighborLoader, DistLoader, DistNeighborLoader
    from pyg_dist.distributed.partitioner import Partitioner
    from pyg_dist.distributed.sampler import DistNeighborSampler
    from pyg_dist.distributed.stores import LocalFeatureStore, LocalGraphStore

_LAZY = {
    "DistContext": "pyg_dist.distributed.context",
    "DistRole": "pyg_dist.distributed.context",
    "LocalFeatureStore": "pyg_dist.distributed.stores",
    "LocalGraphStore": "pyg_dist.distributed.stores",
    "Partitioner": "pyg_dist.distributed.partitioner",
    "DistNeighborSampler": "pyg_dist.distributed.sampler",
    "DistLoader": "pyg_dist.distributed.loaders",
    "DistNeighborLoader": "pyg_dist.distributed.loaders",
    "DistLinkNeighborLoader": "pyg_dist.distributed.loaders",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _LAZY)
