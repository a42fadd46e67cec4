"""The one degree ranking: which rows the caches take first, by how many of this partition's in-edges they are
the source of (how many owned nodes can sample them at the first hop).

Both caches count the same edges, those into this partition's OWNED nodes (a hybrid folder also holds other
destinations' in-edges; they are left out): the host cache ranks REMOTE ids by it
(:func:`degree_ranking`, ``policy="degree"``; the partitioner writes ``feature_cache.pt`` with the same count,
:func:`degree_ranked` over the edges it writes), the device cache its OWN ids (:func:`owned_degree_ranking`,
after the host cache's rows). The counts are plain tensors (:func:`source_counts`, :func:`rank_by_count`); the
functions on a graph store read its edges and its partition book.

Example:
    >>> import torch
    >>> degree_ranked([torch.tensor([3, 3, 2, 0])], owned=torch.tensor([True, True, False, False]))
    tensor([3, 2])
"""
from __future__ import annotations

from typing import List, Sequence

import torch
from torch import Tensor


# ------------------------------------------------------------------------------------------- counts
def rank_by_count(counts: Tensor, owned: Tensor) -> Tensor:
    """Ids with a positive count that are not ``owned`` (bool per id), by count descending, ties by id."""
    counts = counts.clone()
    counts[owned] = 0
    ids = counts.nonzero().view(-1)
    order = torch.sort(counts.index_select(0, ids), descending=True, stable=True).indices
    return ids.index_select(0, order)


def source_counts(sources: Sequence[Tensor], num_nodes: int) -> Tensor:
    """How often each id ``< num_nodes`` appears in ``sources`` (the source ids of in-edges of owned nodes)."""
    counts = torch.zeros(num_nodes, dtype=torch.int64)
    for src in sources:
        if src.numel():
            counts += torch.bincount(src, minlength=num_nodes)
    return counts


def degree_ranked(sources: Sequence[Tensor], owned: Tensor) -> Tensor:
    """Policy ``"degree"``: the ids not ``owned`` (a bool mask over every id of the type) ranked by how many
    in-edges of owned nodes they are the source of (``sources``: those edges' source ids), most first, ties
    by id."""
    return rank_by_count(source_counts(sources, owned.numel()), owned)


def owned_ranked(sources: Sequence[Tensor], owned: Tensor) -> Tensor:
    """Every ``owned`` id (a bool mask over every id of the type), ranked by the count of :func:`degree_ranked`
    (most first, ties by id), the ids with no such edge last, by id: the device cache's order of a partition's
    own rows."""
    counts = source_counts(sources, owned.numel())
    own_ids = owned.nonzero().view(-1)
    return torch.cat([rank_by_count(counts, ~owned), own_ids[counts.index_select(0, own_ids) == 0]])


# ------------------------------------------------------------------------------------------- on a graph store
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


__all__ = ["rank_by_count", "source_counts", "degree_ranked", "owned_ranked", "owned_mask", "owned_in_edge_sources",
           "degree_ranking", "owned_degree_ranking"]
