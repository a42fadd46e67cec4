"""Which remote rows a :class:`~pyg_dist.store.cache.FeatureCache` keeps, and filling it.

Policies (ranking the node ids other partitions own; the top ones within the budget are kept):

* ``"degree"``: by the number of this partition's in-edges they are the source of (edges into owned
  nodes), i.e. how many owned nodes can sample them at the first hop. Pure local work (one counting pass
  over the partition's edges); the partitioner uses it to write ``feature_cache.pt`` (``--cache-ratio``).
* ``"presample"``: by how often they appear in sampled batches: a few warm-up batches of the rank's seeds
  are sampled (remote hops included, no features fetched) and every remote node counted (GLT's idea).

Budget: ``cache_ratio`` (a fraction of the partition's own bytes of the cached attributes) or
``cache_bytes``; ids and rows both count. Filling: bulk reads through the feature store (chunks of
:data:`FILL_CHUNK_BYTES`, one request per owner each), into shared memory so that sampler workers map
the same pages.

Example (in every rank, inside an RPC session):
    >>> cache = build_cache(graph, feats, "degree", cache_ratio=0.25)        # doctest: +SKIP
    >>> feats.set_cache(cache)                                               # doctest: +SKIP
"""
from __future__ import annotations

import time
from typing import Dict, List, Optional, Sequence

import torch
from torch import Tensor

from pyg_dist.errors import InvalidArgumentError, check_choice, check_positive_int
from pyg_dist.store.cache import CacheEntry, FeatureCache

POLICIES = ("degree", "presample")
#: Rows per fill request: at most this many bytes (one request per owner per chunk).
FILL_CHUNK_BYTES = 64 << 20
#: Attributes cached by default (those the loaders fetch), where the folder has them.
DEFAULT_ATTRS = ("x", "y", "time")
_WHERE = "build_cache"


# ------------------------------------------------------------------------------------------- rankings
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


def _owned_mask(book, ntype: str, part: int, num_nodes: int) -> Tensor:
    mask = torch.zeros(num_nodes, dtype=torch.bool)
    mask[book.owned_ids(ntype, part)] = True
    return mask


def degree_ranking(graph_store, ntype: str) -> Tensor:
    """Remote ids of ``ntype`` ranked by their number of edges into this partition's owned nodes."""
    book, part = graph_store.book, graph_store.partition
    sources = []
    for et in graph_store.edge_types:
        if et[0] != ntype:
            continue
        g = graph_store.graph_part(et)
        if graph_store.partition_meta.hybrid:  # every destination is here: keep the owned ones' in-edges
            lo, hi = book.owned_range(et[2], part)
            sources.append(g.row[int(g.colptr[lo - g.dst_start]):int(g.colptr[hi - g.dst_start])])
        else:
            sources.append(g.row)
    n = book.num_items(ntype)
    return rank_by_count(source_counts(sources, n), _owned_mask(book, ntype, part, n))


def presample_ranking(graph_store, feature_store, num_neighbors, seeds: Dict[str, Tensor], batches: int,
                      batch_size: int, seed: int = 0, **sampler_kwargs) -> Dict[str, Tensor]:
    """Remote ids per node type ranked by how often ``batches`` sampled batches of ``seeds`` contain them
    (no features fetched). Needs this process in an RPC world when the partition is not hybrid."""
    from torch_geometric.sampler import NodeSamplerInput

    from pyg_dist import rpc
    from pyg_dist.sampler.dist_neighbor import DistNeighborSampler

    book, part = graph_store.book, graph_store.partition
    sampler = DistNeighborSampler(graph_store, feature_store, num_neighbors, fetch_features=False,
                                  concurrency=4, **sampler_kwargs)
    counts = {t: torch.zeros(book.num_items(t), dtype=torch.int64) for t in graph_store.node_types}
    gen = torch.Generator().manual_seed(seed)
    inputs = []
    for t, ids in seeds.items():
        share = max(1, round(batches * ids.numel() / max(sum(v.numel() for v in seeds.values()), 1)))
        for _ in range(share if ids.numel() else 0):
            pick = ids[torch.randint(0, ids.numel(), (batch_size,), generator=gen)].unique()
            inputs.append(NodeSamplerInput(None, pick, input_type=t if graph_store.is_hetero else None))

    async def count(inp):
        out = await sampler.sample_from_nodes_async(inp)
        nodes = out.node if isinstance(out.node, dict) else {graph_store.node_types[0]: out.node}
        for t, v in nodes.items():
            counts[t] += torch.bincount(v, minlength=counts[t].numel())

    async def run():
        import asyncio
        await asyncio.gather(*(count(i) for i in inputs))

    rpc.run_coroutine(run(), timeout=max(600.0, 5.0 * len(inputs)))
    return {t: rank_by_count(c, _owned_mask(book, t, part, c.numel())) for t, c in counts.items()}


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


def rows_within(budget_bytes: float, row_bytes: int) -> int:
    """Rows of ``row_bytes`` (plus an 8-byte id each) that fit in ``budget_bytes``."""
    return int(budget_bytes // (row_bytes + 8))


def _row_bytes(fs, ntype: str, name: str) -> int:
    col = fs.get_tensor(ntype if fs.is_hetero else None, name)
    return (col[0].numel() if col.size(0) else 0) * col.element_size()


def cached_attrs(feature_store, attr_names: Optional[Sequence[str]]) -> Dict[str, List[str]]:
    """Per node type, the attributes to cache (``attr_names`` or :data:`DEFAULT_ATTRS`, where present)."""
    out = {}
    for t in feature_store.node_types:
        have = feature_store.attr_names(t if feature_store.is_hetero else None, is_node=True)
        if attr_names is not None:
            missing = [n for n in attr_names if n not in have]
            if missing and not feature_store.is_hetero:
                raise InvalidArgumentError(_WHERE, "attr_names", missing, f"attributes of the folder {have}")
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


def build_cache(graph_store, feature_store, policy: str = "degree", *, cache_ratio: Optional[float] = None,
                cache_bytes: Optional[int] = None, attr_names: Optional[Sequence[str]] = None,
                num_neighbors=None, input_nodes: Optional[Dict[str, Tensor]] = None, presample_batches: int = 20,
                batch_size: int = 1024, seed: int = 0, share: bool = True, timeout: Optional[float] = None,
                transfer: str = "rpc", **sampler_kwargs) -> FeatureCache:
    """Selects remote rows by ``policy`` within the budget and reads them (see the module docstring).

    Args:
        graph_store: This process's graph store (rankings).
        feature_store: This process's feature store (in an RPC world for remote reads).
        policy: ``"degree"`` or ``"presample"``.
        cache_ratio: Budget as a fraction of the partition's own bytes of the cached attributes.
        cache_bytes: Budget in bytes (exactly one of the two).
        attr_names: Attributes to cache (default those of :data:`DEFAULT_ATTRS` the folder has).
        num_neighbors: ``"presample"``: the fanouts of the warm-up batches.
        input_nodes: ``"presample"``: seeds per node type (default: owned ``train_mask`` nodes, else all
            owned nodes).
        presample_batches: ``"presample"``: number of warm-up batches.
        batch_size: ``"presample"``: seeds per warm-up batch.
        seed: ``"presample"``: seed of the warm-up batches' seeds.
        share: Fill into shared memory (sampler workers map it instead of copying).
        timeout: Seconds per remote read.
        transfer: ``"rpc"`` (lookups in this process's RPC world) or ``"collective"`` (through the
            process group, every rank at once: trainers whose sampler workers hold the RPC world).
        **sampler_kwargs: ``"presample"``: more ``DistNeighborSampler`` arguments (e.g. ``time_attr``).

    Returns:
        The :class:`FeatureCache` (pass it to ``feature_store.set_cache``); ``info`` holds the policy,
        budget, rows, and the seconds spent selecting and filling.
    """
    check_choice(_WHERE, "policy", policy, POLICIES)
    check_choice(_WHERE, "transfer", transfer, ("rpc", "collective"))
    if policy == "presample" and transfer == "collective":
        raise InvalidArgumentError(_WHERE, "policy", policy, "'degree' with transfer='collective' (presampling "
                                   "samples remote hops over RPC)")
    if (cache_ratio is None) == (cache_bytes is None):
        raise InvalidArgumentError(_WHERE, "cache_ratio", cache_ratio, "a fraction in [0, 1] or cache_bytes, not both")
    if cache_ratio is not None and (isinstance(cache_ratio, bool) or not isinstance(cache_ratio, (int, float))
                                    or not 0 <= cache_ratio <= 1):
        raise InvalidArgumentError(_WHERE, "cache_ratio", cache_ratio, "a fraction in [0, 1]")
    if cache_bytes is not None:
        check_positive_int(_WHERE, "cache_bytes", cache_bytes, allow_zero=True)
    attrs = cached_attrs(feature_store, attr_names)
    rows = budget_rows(feature_store, attrs, cache_ratio, cache_bytes)
    t0 = time.perf_counter()
    if policy == "degree":
        ranked = {t: degree_ranking(graph_store, t) for t in attrs if rows[t]}
    else:
        if num_neighbors is None:
            raise InvalidArgumentError(_WHERE, "num_neighbors", None, "the loader's fanouts (policy='presample')")
        check_positive_int(_WHERE, "presample_batches", presample_batches)
        ranked = presample_ranking(graph_store, feature_store, num_neighbors,
                                   _presample_seeds(feature_store, input_nodes), presample_batches, batch_size,
                                   seed, **sampler_kwargs)
    chosen = {t: torch.sort(ranked[t][:rows[t]]).values for t in attrs if rows[t] and t in ranked}
    t1 = time.perf_counter()
    entries = fill_rows(feature_store, chosen, attrs, share, timeout) if transfer == "rpc" \
        else fill_rows_collective(feature_store, chosen, attrs, share)
    info = {"policy": policy, "cache_ratio": cache_ratio, "cache_bytes": cache_bytes, "part": feature_store.partition,
            "select_seconds": round(t1 - t0, 3), "fill_seconds": round(time.perf_counter() - t1, 3)}
    return FeatureCache(entries, info)


def _presample_seeds(fs, input_nodes: Optional[Dict[str, Tensor]]) -> Dict[str, Tensor]:
    if input_nodes is not None:
        if not isinstance(input_nodes, dict) or not all(isinstance(v, Tensor) for v in input_nodes.values()):
            raise InvalidArgumentError(_WHERE, "input_nodes", type(input_nodes).__name__,
                                       "a dict of node type -> global seed ids")
        return input_nodes
    out = {}
    for t in fs.node_types:
        group = t if fs.is_hetero else None
        has_mask = "train_mask" in fs.attr_names(group, is_node=True)
        out[t] = fs.get_global_id(group, mask="train_mask" if has_mask else None)
    if sum(v.numel() for v in out.values()) == 0:
        out = {t: fs.get_global_id(t if fs.is_hetero else None) for t in fs.node_types}
    return out


__all__ = ["POLICIES", "build_cache", "degree_ranking", "presample_ranking", "budget_rows", "fill_rows",
           "cached_attrs", "rank_by_count", "source_counts", "rows_within", "DEFAULT_ATTRS"]
