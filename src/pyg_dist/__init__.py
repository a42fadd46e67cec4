"""pyg_dist: distributed mini-batch GNN training for PyTorch Geometric.

The pipeline, one package per stage: ``partition/`` (offline: writes folders) -> ``format/`` (the folder as a
format: META, book, entries, reader) -> ``store/`` (one partition per process) -> ``rpc/`` (the runtime) ->
``sampler/`` -> ``loader/`` -> ``train/`` (the front door :func:`dist_session`, checkpoints, inference); beside
them ``ops/`` (kernels), ``datasets/`` (graph sources), ``tma/`` (time-based model aggregation),
``embedding/`` (learnable partitioned rows) and ``distributed/`` (``torch_geometric.distributed``'s API, for
migration).

The public names below are imported on first use, so ``import pyg_dist`` stays cheap and free of side
effects; the ``TYPE_CHECKING`` block makes them visible to IDEs and type checkers (a test checks that it,
``_LAZY`` and ``__all__`` agree).

Example:
    >>> import pyg_dist
    >>> pyg_dist.NeighborLoader.__name__
    'NeighborLoader'
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyg_dist._lazy import lazy_names
from pyg_dist._version import __version__

if TYPE_CHECKING:  # visible to IDEs and type checkers; imported on first use at run time
    from pyg_dist.cache.device import DeviceFeatureCache, build_device_cache
    from pyg_dist.cache.rows import FeatureCache
    from pyg_dist.context import DistContext
    from pyg_dist.datasets.planetoid import load_planetoid
    from pyg_dist.datasets.registry import load_dataset
    from pyg_dist.datasets.synthetic import synthetic_graph
    from pyg_dist.embedding.module import DistEmbedding
    from pyg_dist.embedding.optim import SparseAdagrad, SparseAdam
    from pyg_dist.errors import (
        DataFileError,
        FileWriteError,
        InvalidArgumentError,
        MissingDependencyError,
        NotInitializedError,
        PartitionFormatError,
        PeerFailedError,
        PyGDistError,
        RemoteCallError,
        RpcTimeoutError,
    )
    from pyg_dist.format.book import PartitionBook
    from pyg_dist.format.meta import read_meta
    from pyg_dist.format.reader import load_original_ids, load_partition
    from pyg_dist.loader.dist_link_loader import DistLinkNeighborLoader
    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.loader.link_loader import LinkNeighborLoader
    from pyg_dist.loader.node_loader import NeighborLoader
    from pyg_dist.partition.ooc.partitioner import OutOfCorePartitioner
    from pyg_dist.partition.partitioner import Partitioner
    from pyg_dist.sampler.cache_policy import build_cache
    from pyg_dist.sampler.dist_neighbor import DistNeighborSampler, serve_partition
    from pyg_dist.sampler.neighbor import NeighborSampler
    from pyg_dist.sampler.stats import SamplerStats
    from pyg_dist.store.feature_store import LocalFeatureStore
    from pyg_dist.store.graph_store import LocalGraphStore
    from pyg_dist.store.open import load_stores
    from pyg_dist.tma.schedule import TMAConfig
    from pyg_dist.tma.subgraph import local_subgraph
    from pyg_dist.tma.trainer import run_tma
    from pyg_dist.train.checkpoint import Checkpointer
    from pyg_dist.train.entry import run_main
    from pyg_dist.train.inference import layerwise_inference
    from pyg_dist.train.session import DistEnv, TrainConfig, dist_session, wrap_ddp

_LAZY = {
    # public name: the module that defines it
    "NeighborSampler": "pyg_dist.sampler.neighbor",
    "NeighborLoader": "pyg_dist.loader.node_loader",
    "LinkNeighborLoader": "pyg_dist.loader.link_loader",
    "synthetic_graph": "pyg_dist.datasets.synthetic",
    "load_planetoid": "pyg_dist.datasets.planetoid",
    "load_dataset": "pyg_dist.datasets.registry",
    "DistContext": "pyg_dist.context",
    "DistNeighborSampler": "pyg_dist.sampler.dist_neighbor",
    "SamplerStats": "pyg_dist.sampler.stats",
    "DistNeighborLoader": "pyg_dist.loader.dist_node_loader",
    "DistLinkNeighborLoader": "pyg_dist.loader.dist_link_loader",
    "layerwise_inference": "pyg_dist.train.inference",
    "DistEmbedding": "pyg_dist.embedding.module",
    "SparseAdam": "pyg_dist.embedding.optim",
    "SparseAdagrad": "pyg_dist.embedding.optim",
    "TMAConfig": "pyg_dist.tma.schedule",
    "run_tma": "pyg_dist.tma.trainer",
    "local_subgraph": "pyg_dist.tma.subgraph",
    "TrainConfig": "pyg_dist.train.session",
    "DistEnv": "pyg_dist.train.session",
    "dist_session": "pyg_dist.train.session",
    "wrap_ddp": "pyg_dist.train.session",
    "LocalGraphStore": "pyg_dist.store.graph_store",
    "LocalFeatureStore": "pyg_dist.store.feature_store",
    "load_stores": "pyg_dist.store.open",
    "FeatureCache": "pyg_dist.cache.rows",
    "DeviceFeatureCache": "pyg_dist.cache.device",
    "build_device_cache": "pyg_dist.cache.device",
    "build_cache": "pyg_dist.sampler.cache_policy",
    "serve_partition": "pyg_dist.sampler.dist_neighbor",
    "Partitioner": "pyg_dist.partition.partitioner",
    "PartitionBook": "pyg_dist.format.book",
    "load_partition": "pyg_dist.format.reader",
    "PyGDistError": "pyg_dist.errors",
    "InvalidArgumentError": "pyg_dist.errors",
    "PartitionFormatError": "pyg_dist.errors",
    "DataFileError": "pyg_dist.errors",
    "FileWriteError": "pyg_dist.errors",
    "RemoteCallError": "pyg_dist.errors",
    "NotInitializedError": "pyg_dist.errors",
    "RpcTimeoutError": "pyg_dist.errors",
    "PeerFailedError": "pyg_dist.errors",
    "MissingDependencyError": "pyg_dist.errors",
    "OutOfCorePartitioner": "pyg_dist.partition.ooc.partitioner",
    "Checkpointer": "pyg_dist.train.checkpoint",
    "run_main": "pyg_dist.train.entry",
    "read_meta": "pyg_dist.format.meta",
    "load_original_ids": "pyg_dist.format.reader",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _LAZY, eager=('__version__',))
