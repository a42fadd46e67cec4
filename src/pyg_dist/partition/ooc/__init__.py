"""The out-of-core partitioner, over the same folder format as the in-memory one.

``chunked`` (inputs read in chunks: npy/pt chunks, csv.gz, Parquet) -> ``spill`` (on-disk buckets, block
adjacency) -> ``streaming`` (restreaming Fennel) / ``coarsen`` (label propagation + METIS on clusters) ->
``write`` (one partition at a time, the in-memory layout); ``comm`` ships chunks and edges between the ranks
of a multi-machine run (torchrun, gloo); ``partitioner`` drives it (:class:`OutOfCorePartitioner`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyg_dist._lazy import lazy_names

if TYPE_CHECKING:  # visible to IDEs and type checkers; imported on first use at run time
    from pyg_dist.partition.config import OOC_METHODS
    from pyg_dist.partition.ooc.chunked import ChunkedGraph, open_chunked
    from pyg_dist.partition.ooc.comm import Comm, TorchComm
    from pyg_dist.partition.ooc.partitioner import OutOfCorePartitioner

_LAZY = {
    # public name: the module that defines it
    "OutOfCorePartitioner": "pyg_dist.partition.ooc.partitioner",
    "OOC_METHODS": "pyg_dist.partition.config",
    "ChunkedGraph": "pyg_dist.partition.ooc.chunked",
    "open_chunked": "pyg_dist.partition.ooc.chunked",
    "Comm": "pyg_dist.partition.ooc.comm",
    "TorchComm": "pyg_dist.partition.ooc.comm",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _LAZY)
