"""Offline graph partitioning: everything that writes a partition folder (the format is :mod:`pyg_dist.format`).

- In memory: :class:`Partitioner` (``source`` -> ``assign`` -> ``renumber`` -> ``writer``; ``pyg_writer`` for
  PyG's layout; ``cli`` is ``pyg-dist-partition``).
- Out of core and across machines: :mod:`pyg_dist.partition.ooc` (:class:`OutOfCorePartitioner` over a graph read in
  chunks from disk, :func:`open_chunked`).

A trainer never imports this package: read a folder with :func:`pyg_dist.format.load_partition` or the stores.

Example:
    >>> from pyg_dist.datasets import synthetic_graph
    >>> from pyg_dist.partition import Partitioner
    >>> Partitioner(synthetic_graph(1000, 8), 2, method="random").save("/tmp/p2", overwrite=True)  # doctest: +SKIP
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyg_dist._lazy import lazy_names

if TYPE_CHECKING:  # visible to IDEs and type checkers; imported on first use at run time
    from pyg_dist.partition.config import METHODS, PartitionConfig
    from pyg_dist.partition.ooc.chunked import ChunkedGraph, open_chunked
    from pyg_dist.partition.ooc.partitioner import OutOfCorePartitioner
    from pyg_dist.partition.partitioner import Partitioner

_LAZY = {
    # public name: the module that defines it
    "Partitioner": "pyg_dist.partition.partitioner",
    "PartitionConfig": "pyg_dist.partition.config",
    "METHODS": "pyg_dist.partition.config",
    "OutOfCorePartitioner": "pyg_dist.partition.ooc.partitioner",
    "ChunkedGraph": "pyg_dist.partition.ooc.chunked",
    "open_chunked": "pyg_dist.partition.ooc.chunked",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _LAZY)
