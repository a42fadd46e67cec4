"""The caches, in one place: copies of feature rows a batch would otherwise read from a peer, or copy to the GPU.

- :mod:`.rows` -- :class:`FeatureCache`, the host cache of REMOTE rows (shared memory, so sampler workers map
  the same pages): a batch's remote rows it holds are read here, not fetched.
- :mod:`.ranking` -- the one degree ranking both caches take rows in (edges into this partition's owned nodes).
- :mod:`.fill` -- the budget (``cache_ratio`` or ``cache_bytes``) and reading the chosen rows in bulk.
- :mod:`.device` -- :class:`DeviceFeatureCache`, a partition's hottest rows on the training GPU (the host
  cache's rows first, then owned rows by the same ranking), and :class:`DeviceRowIndex`, its picklable index.

Two pieces live where the stage rules put them, and say so: the file a partition folder may carry
(``feature_cache.pt``, written by the partitioner with the same ranking) is part of the folder format
(:mod:`pyg_dist.format.cache_file`: the offline writers may not import the runtime), and the policy
``build_cache(policy="degree" | "presample")`` is the sampler's (:mod:`pyg_dist.sampler.cache_policy`:
presampling runs warm-up batches of the sampler, which this stage may not import).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyg_dist._lazy import lazy_names

if TYPE_CHECKING:  # visible to IDEs and type checkers; imported on first use at run time
    from pyg_dist.store.cache.device import DeviceFeatureCache, DeviceRowIndex, build_device_cache
    from pyg_dist.store.cache.fill import budget_rows, cached_attrs, fill_rows, fill_rows_collective
    from pyg_dist.store.cache.ranking import degree_ranking, owned_degree_ranking
    from pyg_dist.store.cache.rows import CacheStats, FeatureCache

_LAZY = {
    # public name: the module that defines it
    "FeatureCache": "pyg_dist.store.cache.rows",
    "CacheStats": "pyg_dist.store.cache.rows",
    "degree_ranking": "pyg_dist.store.cache.ranking",
    "owned_degree_ranking": "pyg_dist.store.cache.ranking",
    "budget_rows": "pyg_dist.store.cache.fill",
    "cached_attrs": "pyg_dist.store.cache.fill",
    "fill_rows": "pyg_dist.store.cache.fill",
    "fill_rows_collective": "pyg_dist.store.cache.fill",
    "DeviceFeatureCache": "pyg_dist.store.cache.device",
    "DeviceRowIndex": "pyg_dist.store.cache.device",
    "build_device_cache": "pyg_dist.store.cache.device",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _LAZY)
