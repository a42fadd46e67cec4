"""Opening one partition as a store pair: :func:`load_stores` (the folder checked against the world first)."""
from __future__ import annotations

from typing import Any, Optional, Tuple

from pyg_dist.store.feature_store import LocalFeatureStore
from pyg_dist.store.folder import open_partition
from pyg_dist.store.graph_store import LocalGraphStore


def load_stores(root, part: Optional[int] = None, *, ctx=None, mmap: bool = True,
                verify: Any = "once") -> Tuple[LocalGraphStore, LocalFeatureStore]:
    """Opens one partition (loaded once) as a graph store and a feature store.

    Args:
        root: A partition folder written by pyg_dist (or by PyG's ``Partitioner``).
        part: Partition index; default ``ctx.partition``.
        ctx: The process's :class:`~pyg_dist.context.DistContext`; when given, the folder must have
            ``ctx.num_partitions`` partitions.
        mmap: Memory-map the tensors (default): processes on one machine share one copy of the
            partition through the page cache, and opening is instant. ``False`` reads them into
            private memory (shared with forked children copy-on-write only).
        verify: ``"once"`` (default): re-hash the files this rank opens (its ``part_<i>/`` files, node times)
            and compare them with META.json's digests, once per machine: an unchanged file (same path, size,
            ``mtime_ns``, inode) is remembered in ``~/.cache/pyg_dist/verified/`` and not re-read
            (:mod:`pyg_dist.format.verified`; not caught: a change after that check that keeps the mtime).
            ``True``: re-hash every time, the shared maps and original ids too (about 1.7 GB/s per core).
            ``False``: only byte sizes and 16 sampled 4 KiB blocks per file. Folders that list no digests
            (older, or PyG's) skip all of these.

    Raises:
        PartitionFormatError: naming the file: META.json missing or corrupt, a partition count that
            differs from the world's, a listed name outside the folder, any partition's file missing or not
            a regular file (FIFO, device), byte sizes or content digests that differ from META.json's, sizes
            that disagree with META.
        InvalidArgumentError: ``part`` out of range (or missing without ``ctx``).

    Example:
        >>> graph, feats = load_stores("/tmp/demo-2", 0)          # doctest: +SKIP
        >>> feats.get_global_id(mask="train_mask")[:3]            # doctest: +SKIP
        tensor([0, 4, 9])
    """
    data = open_partition("load_stores", root, part, ctx, mmap, verify)
    return LocalGraphStore(data, mmap=mmap), LocalFeatureStore(data, mmap=mmap)
