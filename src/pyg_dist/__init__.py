"""pyg_dist: distributed mini-batch GNN training for PyTorch Geometric.

Public entry points are re-exported here lazily so ``import pyg_dist`` stays cheap and side-effect free.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    # name: module that defines it
    "NeighborSampler": "pyg_dist.sampler.neighbor",
    "NeighborLoader": "pyg_dist.loader.node_loader",
    "LinkNeighborLoader": "pyg_dist.loader.link_loader",
    "synthetic_graph": "pyg_dist.datasets.synthetic",
    "DistContext": "pyg_dist.context",
    "DistNeighborSampler": "pyg_dist.distributed.sampler",
    "DistNeighborLoader": "pyg_dist.distributed.node_loader",
    "DistLinkNeighborLoader": "pyg_dist.distributed.link_loader",
    "TrainConfig": "pyg_dist.train",
    "dist_session": "pyg_dist.train",
    "LocalGraphStore": "pyg_dist.store",
    "LocalFeatureStore": "pyg_dist.store",
    "load_stores": "pyg_dist.store",
    "load_planetoid": "pyg_dist.datasets.planetoid",
    "load_dataset": "pyg_dist.datasets.registry",
    "Partitioner": "pyg_dist.partition",
    "load_partition": "pyg_dist.partition",
    "PyGDistError": "pyg_dist.errors",
    "InvalidArgumentError": "pyg_dist.errors",
    "PartitionFormatError": "pyg_dist.errors",
    "RemoteCallError": "pyg_dist.errors",
    "NotInitializedError": "pyg_dist.errors",
    "RpcTimeoutError": "pyg_dist.errors",
    "MissingDependencyError": "pyg_dist.errors",
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pyg_dist' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
