"""How many rows a cache may take and reading them: the budget (:func:`budget_rows`), the attributes
(:func:`cached_attrs`) and the bulk fill (:func:`fill_rows` over RPC, :func:`fill_rows_collective` through the
process group).

Budget: ``cache_ratio`` (a fraction of the partition's own bytes of the cached attributes) or
``cache_bytes``; ids and rows both count. Filling: bulk reads through the feature store (chunks of
:data:`FILL_CHUNK_BYTES`, one request per owner each), into shared memory so that sampler workers map
the same pages. Which rows: :mod:`.ranking` (``"degree"``) or the sampler's presampling
(:func:`pyg_dist.sampler.cache_policy.build_cache` chooses the policy).

Example (in every rank, inside an RPC session):
    >>> cache = build_cache(graph, feats, "degree", cache_ratio=0.25)        # doctest: +SKIP
    >>> feats.set_cache(cache)                                               # doctest: +SKIP
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch
from torch import Tensor

from pyg_dist.cache.file import DEFAULT_CACHE_ATTRS as DEFAULT_ATTRS
from pyg_dist.cache.file import CacheEntry, rows_within
from pyg_dist.errors import InvalidArgumentError

#: Rows per fill request: at most this many bytes (one request per owner per chunk).
FILL_CHUNK_BYTES = 64 << 20
_WHERE = "build_cache"


# ------------------------------------------------------------------------------------------- budget
def budget_rows(feature_store, attrs: Dict[str, List[str]], cache_ratio: Optional[float],
                cache_bytes: Optional[int]) -> Dict[str, int]:
    """Rows per node type the budget allows (each row costs its attributes' bytes and an 8-byte id)."""
    own = {t: feature_store.book.owned_ids(t, feature_store.partition).numel() for t in attrs}
    row = {t: sum(_row_bytes(feature_store, t, n) for n in names) for t, names in attrs.items()}
    own_bytes = {t: own[t] * row[t] for t in attrs}
    total = sum(own_bytes.values())
    out = {}
    for t in attrs:
        budget = cache_ratio * own_bytes[t] if cache_ratio is not None else cache_bytes * own_bytes[t] / max(total, 1)
        out[t] = rows_within(budget, row[t])
    return out


def _row_bytes(fs, ntype: str, name: str) -> int:
    col = fs.get_tensor(ntype if fs.is_hetero else None, name)
    return (col[0].numel() if col.size(0) else 0) * col.element_size()


def cached_attrs(feature_store, attr_names: Optional[Sequence[str]], where: str = _WHERE) -> Dict[str, List[str]]:
    """Per node type, the attributes to cache (``attr_names`` or :data:`DEFAULT_ATTRS`, where present); errors
    name ``where``."""
    out = {}
    for t in feature_store.node_types:
        have = feature_store.attr_names(t if feature_store.is_hetero else None, is_node=True)
        if attr_names is not None:
            missing = [n for n in attr_names if n not in have]
            if missing and not feature_store.is_hetero:
                raise InvalidArgumentError(where, "attr_names", missing, f"attributes of the folder {have}")
        names = [n for n in (attr_names if attr_names is not None else DEFAULT_ATTRS) if n in have]
        if names:
            out[t] = names
    return out


# ------------------------------------------------------------------------------------------- filling
def fill_rows(feature_store, ids: Dict[str, Tensor], attrs: Dict[str, List[str]], share: bool = True,
              timeout: Optional[float] = None, rows: bool = True) -> Dict[str, CacheEntry]:
    """Reads the rows of ``ids`` (sorted, remote-owned) into new tensors (shared memory with ``share``):
    chunks of :data:`FILL_CHUNK_BYTES`, every type in one lookup per chunk (one request per owner).
    ``rows=False`` only allocates them."""
    entries = {}
    for t, v in ids.items():
        cols = {}
        for n in attrs[t]:
            col = feature_store.get_tensor(t if feature_store.is_hetero else None, n)
            cols[n] = torch.empty((v.numel(),) + tuple(col.shape[1:]), dtype=col.dtype)
            if share:
                cols[n].share_memory_()
        entries[t] = CacheEntry(v.share_memory_() if share else v, cols)
    step = {t: max(1, FILL_CHUNK_BYTES // max(e.row_bytes, 1)) for t, e in entries.items()}
    rounds = max([-(-e.ids.numel() // step[t]) for t, e in entries.items()] + [0]) if rows else 0
    for r in range(rounds):
        chunk = {t: e.ids[r * step[t]:(r + 1) * step[t]] for t, e in entries.items()}
        chunk = {t: v for t, v in chunk.items() if v.numel()}
        got = feature_store.lookup_many_async(chunk, {t: attrs[t] for t in chunk}, timeout=timeout).wait()
        for t, values in got.items():
            for n, value in values.items():
                entries[t].cols[n][r * step[t]:r * step[t] + value.size(0)] = value
    return entries


def fill_rows_collective(feature_store, ids: Dict[str, Tensor], attrs: Dict[str, List[str]],
                         share: bool = True) -> Dict[str, CacheEntry]:
    """Like :func:`fill_rows`, through the process group instead of RPC (every rank calls it at once): the
    requests travel by ``all_gather_object``, the rows point to point from the lowest rank of each owner."""
    import torch.distributed as dist
    me = dist.get_rank()
    owner = {t: feature_store.book.owner(t, v) for t, v in ids.items()}
    want = {p: {t: v[owner[t] == p] for t, v in ids.items()} for p in range(feature_store.num_partitions)}
    every: List = [None] * dist.get_world_size()
    dist.all_gather_object(every, (feature_store.partition, want))
    server: Dict[int, int] = {}
    for rank, (part, _) in enumerate(every):
        server.setdefault(part, rank)
    entries = fill_rows(feature_store, ids, attrs, share, rows=False)
    ops, tag = [], 0
    for rank, (_, asks) in enumerate(every):
        for p in range(feature_store.num_partitions):
            for t in sorted(attrs):
                ask = asks[p].get(t)
                sel = owner[t] == p if t in ids else None
                for n in attrs[t]:
                    tag += 1
                    if server.get(p) == me and rank != me and ask is not None and ask.numel():
                        rows = feature_store.book.to_local(t, ask)
                        col = feature_store.get_tensor(t if feature_store.is_hetero else None, n)
                        ops.append(dist.P2POp(dist.isend, col.index_select(0, rows).contiguous(), rank, tag=tag))
                    if rank == me and sel is not None and bool(sel.any()):
                        like = entries[t].cols[n]
                        buf = torch.empty((int(sel.sum()),) + tuple(like.shape[1:]), dtype=like.dtype)
                        ops.append(dist.P2POp(dist.irecv, buf, server[p], tag=tag))
                        ops[-1].fill = (t, n, sel)  # type: ignore[attr-defined]
    for req in (dist.batch_isend_irecv(ops) if ops else []):
        req.wait()
    for op in ops:
        if hasattr(op, "fill"):
            t, n, sel = op.fill
            entries[t].cols[n][sel] = op.tensor
    return entries


__all__ = ["budget_rows", "fill_rows", "fill_rows_collective", "cached_attrs", "DEFAULT_ATTRS", "FILL_CHUNK_BYTES"]
