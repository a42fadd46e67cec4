"""The caches, in one place: copies of feature rows a batch would otherwise read from a peer, or copy to the GPU,
and the files a partition folder may carry with them. A stage of its own, below the stores and beside the folder
format, so that the partitioner (which writes the files) and the runtime (which reads and fills them) share one
ranking and one file format.

- :mod:`.rows` -- :class:`FeatureCache`, the host cache of REMOTE rows (shared memory, so sampler workers map
  the same pages): a batch's remote rows it holds are read here, not fetched.
- :mod:`.ranking` -- the one degree ranking both caches and the partitioner take rows in (edges into a
  partition's owned nodes), from the counts up.
- :mod:`.fill` -- the budget (``cache_ratio`` or ``cache_bytes``) and reading the chosen rows in bulk.
- :mod:`.device` -- :class:`DeviceFeatureCache`, a partition's hottest rows on the training GPU (the host
  cache's rows first, then owned rows by the same ranking), and :class:`DeviceRowIndex`, its picklable index.
- :mod:`.file` -- ``feature_cache.pt`` and ``topology_cache.pt``, written by ``pyg-dist-partition --cache-ratio``.

One piece lives where the stage rules put it, and says so: the policy ``build_cache(policy="degree" |
"presample")`` is the sampler's (:mod:`pyg_dist.sampler.cache_policy`: presampling runs warm-up batches of the
sampler, which this stage may not import).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyg_dist._lazy import lazy_names

if TYPE_CHECKING:  # visible to IDEs and type checkers; imported on first use at run time
    from pyg_dist.cache.device import DeviceFeatureCache, DeviceRowIndex, build_device_cache
    from pyg_dist.cache.file import CacheEntry
    from pyg_dist.cache.fill import budget_rows, cached_attrs, fill_rows, fill_rows_collective
    from pyg_dist.cache.ranking import degree_ranking, owned_degree_ranking
    from pyg_dist.cache.rows import CacheStats, FeatureCache

_LAZY = {
    # public name: the module that defines it
    "FeatureCache": "pyg_dist.cache.rows",
    "CacheStats": "pyg_dist.cache.rows",
    "degree_ranking": "pyg_dist.cache.ranking",
    "owned_degree_ranking": "pyg_dist.cache.ranking",
    "budget_rows": "pyg_dist.cache.fill",
    "cached_attrs": "pyg_dist.cache.fill",
    "fill_rows": "pyg_dist.cache.fill",
    "fill_rows_collective": "pyg_dist.cache.fill",
    "DeviceFeatureCache": "pyg_dist.cache.device",
    "DeviceRowIndex": "pyg_dist.cache.device",
    "build_device_cache": "pyg_dist.cache.device",
    "CacheEntry": "pyg_dist.cache.file",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _LAZY)
