"""PyG-compatible loaders running on pyg_dist's sampler: ``NeighborLoader`` and ``LinkNeighborLoader``.

Imported lazily (``pyg_dist.NeighborLoader``) so ``import pyg_dist`` stays cheap.
"""
from pyg_dist.loader.link_loader import LinkNeighborLoader
from pyg_dist.loader.node_loader import NeighborLoader

__all__ = ["NeighborLoader", "LinkNeighborLoader"]
