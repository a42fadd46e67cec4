"""The partition folder as a format: what every writer fills and every reader (the runtime) reads.

- :mod:`.meta`: ``META.json`` <-> :class:`PartitionMeta`, and every file name of the folder.
- :mod:`.schema`: the entries of the ``.pt`` files (:class:`GraphEntry`, :class:`NodeEntry`, :class:`EdgeEntry`,
  :class:`TopologyCacheEntry`), one typed definition each.
- :mod:`.book`: the partition book (:class:`PartitionBook`, a range table; :class:`DensePartitionBook` for
  folders PyG's ``Partitioner`` wrote), the only place that translates global ids.
- :mod:`.reader` (+ :mod:`.pyg_compat`): one partition loaded as typed dicts (:func:`load_partition`).
- :mod:`.digests` / :mod:`.verified`: file digests and the folder id; the content check at open (default: whole
  files once per machine, remembered).

Runtime code (stores, sampler, loaders, trainers) imports this package, never :mod:`pyg_dist.partition`.

Example:
    >>> from pyg_dist.format import load_partition, read_meta
    >>> read_meta("/tmp/p2").num_parts                                   # doctest: +SKIP
    2
    >>> load_partition("/tmp/p2", 0).book.owned_range("_N", 0)           # doctest: +SKIP
    (0, 500)
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyg_dist._lazy import lazy_names

if TYPE_CHECKING:  # visible to IDEs and type checkers; imported on first use at run time
    from pyg_dist.format.book import DensePartitionBook, PartitionBook
    from pyg_dist.format.data import EdgeFeats, GraphPart, NodeFeats, PartitionData
    from pyg_dist.format.identity import folder_id
    from pyg_dist.format.meta import PartitionMeta, read_meta, write_meta
    from pyg_dist.format.reader import load_book, load_original_ids, load_partition
    from pyg_dist.format.schema import EdgeEntry, GraphEntry, NodeEntry, TopologyCacheEntry

_LAZY = {
    # public name: the module that defines it
    "PartitionMeta": "pyg_dist.format.meta",
    "read_meta": "pyg_dist.format.meta",
    "write_meta": "pyg_dist.format.meta",
    "PartitionBook": "pyg_dist.format.book",
    "DensePartitionBook": "pyg_dist.format.book",
    "PartitionData": "pyg_dist.format.data",
    "GraphPart": "pyg_dist.format.data",
    "NodeFeats": "pyg_dist.format.data",
    "EdgeFeats": "pyg_dist.format.data",
    "load_partition": "pyg_dist.format.reader",
    "load_book": "pyg_dist.format.reader",
    "load_original_ids": "pyg_dist.format.reader",
    "GraphEntry": "pyg_dist.format.schema",
    "NodeEntry": "pyg_dist.format.schema",
    "EdgeEntry": "pyg_dist.format.schema",
    "TopologyCacheEntry": "pyg_dist.format.schema",
    "folder_id": "pyg_dist.format.identity",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _LAZY)
