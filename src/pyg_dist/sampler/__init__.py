"""Every sampler: the one-machine :class:`NeighborSampler` and :class:`DistNeighborSampler`.

- ``neighbor.py`` / ``dist_neighbor.py``: the two samplers (PyG ``BaseSampler`` subclasses).
- ``hops.py``: the K-hop loop (frontier, relabel, per-hop counts, time, disjoint).
- ``plan.py``: routing of one hop by owner; ``seeds.py``: node seeds, link seeds, negatives.
- ``features.py``: the batch's feature round; ``messages.py``: typed RPC messages and metadata.
- ``stats.py``: opt-in counters; ``output.py``: the typed sample and its conversion to PyG's outputs.
- ``induced.py``: ``subgraph_type='induced'`` (one more full-fanout round over the sampled nodes).
- ``store_pair.py``: any PyG ``(FeatureStore, GraphStore)`` pair as a graph to sample.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyg_dist._lazy import lazy_names

if TYPE_CHECKING:  # visible to IDEs and type checkers; imported on first use at run time
    from pyg_dist.sampler.cache_policy import build_cache
    from pyg_dist.sampler.dist_neighbor import DistNeighborSampler
    from pyg_dist.sampler.neighbor import NeighborSampler
    from pyg_dist.sampler.output import TypedSample, to_sampler_output
    from pyg_dist.sampler.stats import SamplerStats

_LAZY = {
    # public name: the module that defines it
    "NeighborSampler": "pyg_dist.sampler.neighbor",
    "TypedSample": "pyg_dist.sampler.output",
    "to_sampler_output": "pyg_dist.sampler.output",
    "DistNeighborSampler": "pyg_dist.sampler.dist_neighbor",
    "SamplerStats": "pyg_dist.sampler.stats",
    "build_cache": "pyg_dist.sampler.cache_policy",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _LAZY)
