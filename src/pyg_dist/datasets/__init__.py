"""Graph sources: the built-in synthetic generator and offline loaders for data already on disk."""
from pyg_dist.datasets.planetoid import load_planetoid, shared_data_root
from pyg_dist.datasets.registry import load_dataset
from pyg_dist.datasets.synthetic import synthetic_graph

__all__ = ["synthetic_graph", "load_dataset", "load_planetoid", "shared_data_root"]
