"""The one degree ranking: which rows the caches take first, by how many of this partition's in-edges they are
the source of (how many owned nodes can sample them at the first hop).

Both caches count the same edges, those into this partition's OWNED nodes (a hybrid folder also holds other
destinations' in-edges; they are left out): the host cache ranks REMOTE ids by it
(:func:`degree_ranking`, ``policy="degree"``; the partitioner writes ``feature_cache.pt`` with the same count,
:func:`pyg_dist.format.cache_file.degree_ranked`), the device cache its OWN ids (:func:`owned_degree_ranking`,
after the host cache's rows).

Example:
    >>> import torch
    >>> from pyg_dist.format.cache_file import degree_ranked
    >>> degree_ranked([torch.tensor([3, 3, 2, 0])], owned=torch.tensor([True, True, False, False]))
    tensor([3, 2])
"""
from __future__ import annotations

from typing import List

import torch
from torch import Tensor

from pyg_dist.format.cache_file import degree_ranked, owned_ranked


def owned_mask(book, ntype: str, part: int, num_nodes: int) -> Tensor:
    """A bool mask over every id of ``ntype``: True where partition ``part`` owns it."""
    mask = torch.zeros(num_nodes, dtype=torch.bool)
    mask[book.owned_ids(ntype, part)] = True
    return mask


def owned_in_edge_sources(graph_store, ntype: str) -> List[Tensor]:
    """The source ids (of ``ntype``) of every in-edge of this partition's OWNED nodes, one tensor per edge type:
    what both degree rankings count (a hybrid folder holds every destination's in-edges; only the owned ones'
    are kept)."""
    book, part = graph_store.book, graph_store.partition
    sources = []
    for et in graph_store.edge_types:
        if et[0] != ntype:
            continue
        csc, (start, _) = graph_store.local_csc(et), graph_store.dst_range(et)  # row may be int32 (compact)
        if graph_store.partition_meta.hybrid:
            lo, hi = book.owned_range(et[2], part)
            sources.append(csc.row[int(csc.colptr[lo - start]):int(csc.colptr[hi - start])])
        else:
            sources.append(csc.row)
    return sources


def degree_ranking(graph_store, ntype: str) -> Tensor:
    """Remote ids of ``ntype`` ranked by their number of edges into this partition's owned nodes."""
    sources = owned_in_edge_sources(graph_store, ntype)
    owned = owned_mask(graph_store.book, ntype, graph_store.partition, graph_store.book.num_items(ntype))
    return degree_ranked(sources, owned)


def owned_degree_ranking(graph_store, ntype: str) -> Tensor:
    """Every OWNED id of ``ntype``, ranked by the same count as :func:`degree_ranking` (zero counts last, by
    id): the order the device cache takes a partition's own rows in."""
    sources = owned_in_edge_sources(graph_store, ntype)
    owned = owned_mask(graph_store.book, ntype, graph_store.partition, graph_store.book.num_items(ntype))
    return owned_ranked(sources, owned)


__all__ = ["owned_mask", "owned_in_edge_sources", "degree_ranking", "owned_degree_ranking"]
