"""Distributed training over a partition folder: the sampler, its pieces, and (lazily) the loaders.

- ``sampler.py``: :class:`DistNeighborSampler` (PyG ``BaseSampler``) and :func:`register_callees`.
- ``hops.py``: the distributed hop loop and the one-hop service; ``plan.py``: pure routing / merging.
- ``features.py``: the batch's feature round; ``messages.py``: typed requests, replies and metadata.
- ``stats.py``: opt-in counters (local / remote nodes, feature rows, requests, bytes).
- ``node_loader.py`` / ``link_loader.py`` / ``inference.py``: ``DistNeighborLoader``,
  ``DistLinkNeighborLoader``, ``layerwise_inference`` (imported on first use).
"""
import importlib

from pyg_dist.distributed.messages import (ONE_HOP_OP, DistLinkMetadata, DistNodeMetadata, DistTripletMetadata,
                                           FeatureBatch, HopTask, OneHopReply, OneHopRequest)
from pyg_dist.distributed.sampler import DistNeighborSampler, register_callees
from pyg_dist.distributed.stats import SamplerStats

_LAZY = {
    "DistNeighborLoader": "pyg_dist.distributed.node_loader",
    "DistLinkNeighborLoader": "pyg_dist.distributed.link_loader",
    "layerwise_inference": "pyg_dist.distributed.inference",
}

__all__ = ["DistNeighborSampler", "register_callees", "SamplerStats", "FeatureBatch", "DistNodeMetadata",
           "DistLinkMetadata", "DistTripletMetadata", "ONE_HOP_OP", "HopTask", "OneHopRequest",
           "OneHopReply"] + sorted(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pyg_dist.distributed' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
