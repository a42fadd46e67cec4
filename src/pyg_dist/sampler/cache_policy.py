"""Building a :class:`~pyg_dist.cache.rows.FeatureCache` by policy: ``"degree"`` (the store's own ranking,
:func:`~pyg_dist.cache.ranking.degree_ranking`) or ``"presample"`` (warm-up batches of this sampler count
the remote nodes they reach). The policy lives here, above the store, because presampling needs the sampler;
the store keeps only the ranking-agnostic parts (budget, bulk fill).

Example (in every rank, inside an RPC session):
    >>> cache = build_cache(graph, feats, "presample", cache_ratio=0.25, num_neighbors=[15, 10, 5])  # doctest: +SKIP
    >>> feats.set_cache(cache)                                                                      # doctest: +SKIP
"""
from __future__ import annotations

import time
from typing import Dict, Optional, Sequence

import torch
from torch import Tensor

from pyg_dist.cache.fill import budget_rows, cached_attrs, fill_rows, fill_rows_collective
from pyg_dist.cache.ranking import degree_ranking, owned_mask, rank_by_count
from pyg_dist.cache.rows import FeatureCache
from pyg_dist.errors import InvalidArgumentError, check_choice, check_positive_int

POLICIES = ("degree", "presample")
_WHERE = "build_cache"


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
    return {t: rank_by_count(c, owned_mask(book, t, part, c.numel())) for t, c in counts.items()}


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


__all__ = ["POLICIES", "build_cache", "presample_ranking"]
