"""Graph sources: the built-in synthetic generator and offline loaders for data already on disk."""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyg_dist._lazy import lazy_names

if TYPE_CHECKING:  # visible to IDEs and type checkers; imported on first use at run time
    from pyg_dist.datasets.planetoid import load_planetoid, shared_data_root
    from pyg_dist.datasets.registry import load_dataset
    from pyg_dist.datasets.synthetic import synthetic_graph

_LAZY = {
    # public name: the module that defines it
    "synthetic_graph": "pyg_dist.datasets.synthetic",
    "load_dataset": "pyg_dist.datasets.registry",
    "load_planetoid": "pyg_dist.datasets.planetoid",
    "shared_data_root": "pyg_dist.datasets.planetoid",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _LAZY)
