"""Offline graph partitioning and the partition-folder reader.

Write a folder with :class:`Partitioner` (or the ``pyg-dist-partition`` command), or with
:class:`OutOfCorePartitioner` for a graph read in chunks from disk (:func:`open_chunked`); read one partition
with :func:`load_partition`, which returns typed dicts and a :class:`PartitionBook` (range table) or a
:class:`DensePartitionBook` (folders written by PyG's own ``Partitioner``).

Example:
    >>> from pyg_dist.datasets import synthetic_graph
    >>> from pyg_dist.partition import Partitioner, load_partition
    >>> Partitioner(synthetic_graph(1000, 8), 2, method="random").save("/tmp/p2", overwrite=True)  # doctest: +SKIP
    >>> load_partition("/tmp/p2", 0).book.owned_range("_N", 0)  # doctest: +SKIP
    (0, 500)
"""
from pyg_dist.partition.book import DensePartitionBook, PartitionBook
from pyg_dist.partition.chunked import ChunkedGraph, open_chunked
from pyg_dist.partition.meta import PartitionMeta, read_meta
from pyg_dist.partition.out_of_core import OutOfCorePartitioner
from pyg_dist.partition.partitioner import METHODS, PartitionConfig, Partitioner
from pyg_dist.partition.reader import (
    EdgeFeats,
    GraphPart,
    NodeFeats,
    PartitionData,
    load_book,
    load_original_ids,
    load_partition,
)

__all__ = ["Partitioner", "OutOfCorePartitioner", "ChunkedGraph", "open_chunked", "PartitionConfig", "METHODS",
           "PartitionMeta", "read_meta", "PartitionBook", "DensePartitionBook", "PartitionData", "GraphPart",
           "NodeFeats", "EdgeFeats", "load_partition", "load_book", "load_original_ids"]
