"""Opening one partition as a store pair: :func:`load_stores` (the folder checked against the world first)."""
from __future__ import annotations

from typing import Optional, Tuple

from pyg_dist.store.feature_store import LocalFeatureStore
from pyg_dist.store.folder import open_partition
from pyg_dist.store.graph_store import LocalGraphStore


def load_stores(root, part: Optional[int] = None, *, ctx=None, mmap: bool = True,
                verify: bool = False) -> Tuple[LocalGraphStore, LocalFeatureStore]:
    """Opens one partition (loaded once) as a graph store and a feature store.

    Args:
        root: A partition folder written by pyg_dist (or by PyG's ``Partitioner``).
        part: Partition index; default ``ctx.partition``.
        ctx: The process's :class:`~pyg_dist.context.DistContext`; when given, the folder must have
            ``ctx.num_partitions`` partitions.
        mmap: Memory-map the tensors (default): processes on one machine share one copy of the
            partition through the page cache, and opening is instant. ``False`` reads them into
            private memory (shared with forked children copy-on-write only).
        verify: Also re-hash this partition's files and the shared ones (maps, original ids) and compare
            them with the digests META.json lists (about 1.7 GB/s per core). Without it only their byte sizes
            are compared (one ``stat`` each); folders that list no digests (older, or PyG's) skip both.

    Raises:
        PartitionFormatError: naming the file: META.json missing or corrupt, a partition count that
            differs from the world's, any partition's file missing, byte sizes or (``verify``) content
            digests that differ from META.json's, sizes that disagree with META.
        InvalidArgumentError: ``part`` out of range (or missing without ``ctx``).

    Example:
        >>> graph, feats = load_stores("/tmp/demo-2", 0)          # doctest: +SKIP
        >>> feats.get_global_id(mask="train_mask")[:3]            # doctest: +SKIP
        tensor([0, 4, 9])
    """
    data = open_partition("load_stores", root, part, ctx, mmap, verify)
    return LocalGraphStore(data, mmap=mmap), LocalFeatureStore(data, mmap=mmap)
