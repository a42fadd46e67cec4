"""Values read from a partition's files, checked once at open before any kernel indexes with them.

:func:`~pyg_dist.format.reader.load_partition` checks the entries' shapes; the stores check that row counts agree
with the book (:func:`pyg_dist.store.folder.check_sizes`); this module checks the VALUES that kernels index with:
destination ranges, CSC pointers (start at 0, never decrease, end at the edge count), source and edge ids within
their types, owned ids within their types, full node time of every node. One vectorised pass per tensor; a
failure is a :class:`~pyg_dist.errors.PartitionFormatError` naming the file, the entry and the first bad value.

Example:
    >>> check_values(load_partition("/data/products-2", 0))       # doctest: +SKIP
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from pyg_dist.errors import PartitionFormatError
from pyg_dist.format import meta as M
from pyg_dist.format.book import PartitionBook
from pyg_dist.format.data import GraphPart, PartitionData


def check_ids(path, what: str, ids: Optional[Tensor], end: int) -> None:
    """``ids`` (any integer tensor) all in ``[0, end)``."""
    if ids is None or not ids.numel():
        return
    lo, hi = torch.aminmax(ids)
    if int(lo) < 0 or int(hi) >= end:
        bad = ids[(ids < 0) | (ids >= end)][:3].tolist()
        raise PartitionFormatError(path, f"{what}: ids {bad} fall outside [0, {end})")


def check_graph_part(path, etype, g: GraphPart, num_edges: int) -> None:
    """One edge type's CSC: the destination range, monotone pointers, source and edge ids in range."""
    if not 0 <= g.dst_start <= g.dst_end <= g.num_dst:
        raise PartitionFormatError(path, f"entry {etype!r}: destination range [{g.dst_start}, {g.dst_end}) is not "
                                         f"inside [0, {g.num_dst}]")
    colptr = g.colptr
    if colptr.dim() != 1 or colptr.numel() != g.dst_end - g.dst_start + 1 or int(colptr[0]) != 0 \
            or int(colptr[-1]) != g.row.numel():
        raise PartitionFormatError(path, f"entry {etype!r}: colptr must hold {g.dst_end - g.dst_start + 1} pointers "
                                         f"from 0 to {g.row.numel()} (the edge count)")
    if colptr.numel() > 1 and bool((colptr[1:] < colptr[:-1]).any()):
        at = int((colptr[1:] < colptr[:-1]).nonzero()[0])
        raise PartitionFormatError(path, f"entry {etype!r}: colptr decreases at position {at} "
                                         f"({int(colptr[at])} -> {int(colptr[at + 1])})")
    check_ids(path, f"entry {etype!r}, row (source ids)", g.row, g.num_src)
    check_ids(path, f"entry {etype!r}, edge_id", g.edge_id, num_edges)


def check_values(pd: PartitionData) -> None:
    """Every value of ``pd`` that a kernel indexes with lies in range, and a pyg_dist folder's partition holds the
    ids META.json's bounds give it (a ``part_<i>`` copied over another is refused; see the module docstring)."""
    meta, p = pd.meta, pd.part
    ranged = meta.is_native and isinstance(pd.book, PartitionBook)
    for e, g in pd.graph.items():
        check_graph_part(M.graph_path(meta.root, p), e, g, meta.num_edges[e])
        if ranged and not meta.hybrid and (g.dst_start, g.dst_end) != pd.book.owned_range(e[-1], p):
            raise PartitionFormatError(M.graph_path(meta.root, p), f"entry {e!r}: destinations [{g.dst_start}, "
                                       f"{g.dst_end}) are not partition {p}'s, {list(pd.book.owned_range(e[-1], p))} "
                                       "by META.json's bounds (another partition's file?)")
    for t, nf in pd.node_feats.items():
        end = meta.num_nodes[t]
        if ranged and nf.global_id is not None and nf.global_id.numel():
            start, end = pd.book.owned_range(t, p)
            if int(nf.global_id.min()) < start:
                raise PartitionFormatError(M.node_feats_path(meta.root, p), f"entry {t!r}, global_id: "
                                           f"{int(nf.global_id.min())} is not partition {p}'s (it owns "
                                           f"[{start}, {end}) by META.json's bounds; another partition's file?)")
        check_ids(M.node_feats_path(meta.root, p), f"entry {t!r}, global_id", nf.global_id, end)
    for e, ef in pd.edge_feats.items():
        check_ids(M.edge_feats_path(meta.root, p), f"entry {e!r}, global_id", ef.global_id, meta.num_edges[e])
    for t, time in pd.full_node_time.items():
        if time.dim() != 1 or time.numel() != meta.num_nodes[t]:
            raise PartitionFormatError(M.full_node_time_path(meta.root, t),
                                       f"holds {tuple(time.shape)} times; expected one per node ({meta.num_nodes[t]})")


__all__ = ["check_values", "check_graph_part", "check_ids"]
