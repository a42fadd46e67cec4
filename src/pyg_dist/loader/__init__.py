"""Every loader: one-machine ``NeighborLoader`` / ``LinkNeighborLoader`` (drop-ins for PyG's) and the
distributed ``DistNeighborLoader`` / ``DistLinkNeighborLoader``, with their seed split, prefetching and
worker setup. Imported lazily (``pyg_dist.NeighborLoader``) so ``import pyg_dist`` stays cheap.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyg_dist._lazy import lazy_names

if TYPE_CHECKING:
    from pyg_dist.loader.dist_link_loader import DistLinkNeighborLoader
    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.loader.link_loader import LinkNeighborLoader
    from pyg_dist.loader.node_loader import NeighborLoader

_LAZY = {
    "NeighborLoader": "pyg_dist.loader.node_loader",
    "LinkNeighborLoader": "pyg_dist.loader.link_loader",
    "DistNeighborLoader": "pyg_dist.loader.dist_node_loader",
    "DistLinkNeighborLoader": "pyg_dist.loader.dist_link_loader",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _LAZY)
