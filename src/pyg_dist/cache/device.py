"""``DeviceFeatureCache``: a partition's hottest feature rows kept on the GPU.

With the model on a GPU every batch's node rows cross PCIe: ~150 MB per batch of the products-shaped graph
(1024 seeds, fanouts [15, 10, 5], 100 float32 features). The rows do not change during training, so the rows
batches ask for most can live on the GPU instead: the remote-feature cache's rows
(:class:`~pyg_dist.cache.rows.FeatureCache`, which batches would otherwise read from host memory) first, then,
while the byte budget lasts, the partition's own rows ranked by how many of its in-edges they are the source of
(the rows sampling reaches most; the same count as the host cache's ranking,
:func:`~pyg_dist.cache.ranking.owned_degree_ranking`). A batch's feature round then asks the host only for
the rows the GPU does not hold (:func:`pyg_dist.sampler.features.fetch_features_async`), and the loader's device stage
(:mod:`pyg_dist.loader.device`) assembles each attribute on the GPU from the cached rows and the copied host
rows: cached rows are neither gathered on the host nor copied per batch.

Split in two: :class:`DeviceRowIndex` (CPU, picklable: which global ids the GPU holds, per node type; what the
sampler needs, in DataLoader workers too) and :class:`DeviceFeatureCache` (the index and the rows on the GPU:
the training process only). Node attributes only (``x``, ``y``, ``time`` by default); a node type is served
from the cache only when the cache holds every attribute the sampler fetches for it. Learnable columns
(``DistEmbedding``) must not be cached: they change.

Example:
    >>> cache = build_device_cache(env.feature_store, env.graph_store, "cuda", max_bytes=8 << 30)  # doctest: +SKIP
    >>> loader = DistNeighborLoader(env, [15, 10, 5], batch_size=1024, gpu_cache=cache)            # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence, Tuple

import torch
from torch import Tensor

from pyg_dist.cache.file import DEFAULT_CACHE_ATTRS, CacheEntry, rows_within
from pyg_dist.cache.fill import cached_attrs
from pyg_dist.cache.ranking import owned_degree_ranking
from pyg_dist.cache.rows import FeatureCache
from pyg_dist.errors import InvalidArgumentError

_WHERE = "build_device_cache"
#: Attributes cached by default, where the folder has them (what the sampler fetches by default; the host
#: cache's default too).
DEFAULT_DEVICE_ATTRS = DEFAULT_CACHE_ATTRS
#: Rows per fill step: at most this many host bytes at once.
FILL_CHUNK_BYTES = 64 << 20


@dataclass
class DeviceRows:
    """One node type's rows of one batch, split between the device cache and the host.

    ``hit_pos`` (positions in the batch's node list) take rows ``hit_slot`` of the cache; ``miss_pos`` take
    ``host[name]`` (one row per miss, in that order). ``num``: the batch's node count of the type.
    """
    num: int
    hit_pos: Tensor
    hit_slot: Tensor
    miss_pos: Tensor
    host: Dict[str, Tensor] = field(default_factory=dict)


class DeviceRowIndex:
    """Which global ids of which node types have their rows on the device (CPU tensors only; picklable).

    Args:
        ids: Node type -> sorted global ids held on the device (row ``i`` of the cache is ``ids[i]``).
        attrs: Node type -> the attributes held for it.
    """

    def __init__(self, ids: Dict[str, Tensor], attrs: Dict[str, Sequence[str]]):
        self._slots = FeatureCache({t: CacheEntry(v, {}) for t, v in ids.items()})
        self.attrs = {t: tuple(attrs[t]) for t in ids}

    def covers(self, group, names: Sequence[str]) -> bool:
        """Whether rows of ``names`` of ``group`` can come from the device (every name held for it)."""
        held = self.attrs.get(group) if isinstance(group, str) else None
        return held is not None and all(n in held for n in names)

    def split(self, group: str, ids: Tensor) -> DeviceRows:
        """``ids`` (the batch's node list of ``group``) split into cached and host positions."""
        hit_pos, hit_slot, miss_pos = self._slots.split(group, ids)
        return DeviceRows(ids.numel(), hit_pos, hit_slot, miss_pos)

    @property
    def stats(self):
        """Rows answered by the device (``hits``) and by the host (``misses``) per type, since it was built."""
        return self._slots.stats

    @property
    def num_rows(self) -> Dict[str, int]:
        return self._slots.num_rows


class DeviceFeatureCache:
    """Feature rows on a device, with their :class:`DeviceRowIndex` (see the module docstring).

    Args:
        ids: Node type -> sorted global ids (CPU int64).
        rows: Node type -> attribute -> rows on ``device`` (row ``i`` belongs to ``ids[t][i]``).
        device: Where the rows live.
    """

    def __init__(self, ids: Dict[str, Tensor], rows: Dict[str, Dict[str, Tensor]], device: torch.device):
        for t, cols in rows.items():
            for name, col in cols.items():
                if col.device != device or col.size(0) != ids[t].numel():  # device: normalised (an index)
                    raise InvalidArgumentError("DeviceFeatureCache", "rows", f"{t!r}/{name!r}",
                                               f"{ids[t].numel()} rows on {device}")
        self.index = DeviceRowIndex(ids, {t: list(c) for t, c in rows.items()})
        self.rows, self.device = rows, device

    @property
    def nbytes(self) -> int:
        """Bytes of the rows on the device."""
        return sum(c.numel() * c.element_size() for cols in self.rows.values() for c in cols.values())

    def __repr__(self) -> str:
        return (f"DeviceFeatureCache(device={self.device}, rows={self.index.num_rows}, "
                f"MB={self.nbytes / 2 ** 20:.1f})")

    def assemble(self, group: str, plan: DeviceRows, cast) -> Dict[str, Tensor]:
        """Every cached attribute of ``group`` for one batch, on the device, on the current stream: the
        cached rows at ``plan.hit_pos`` and ``plan.host`` at ``plan.miss_pos`` (``plan``'s tensors already on
        the device). ``cast(name, tensor)``: the batch's dtype rule (the loader's ``feature_dtype``)."""
        out = {}
        for name, col in self.rows[group].items():
            hits = cast(name, col.index_select(0, plan.hit_slot))
            value = torch.empty((plan.num,) + tuple(col.shape[1:]), dtype=hits.dtype, device=self.device)
            value.index_copy_(0, plan.hit_pos, hits)
            if plan.miss_pos.numel():
                value.index_copy_(0, plan.miss_pos, plan.host[name].to(hits.dtype))
            out[name] = value
        return out


def normal_device(device) -> torch.device:
    """``device`` as a ``torch.device`` with its index (``"cuda"`` -> the current CUDA device)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _candidates(feature_store, graph_store, ntype: str) -> Tensor:
    """Ids in the order they are cached: the host cache's rows, then owned rows by in-edge count."""
    host = feature_store.cache
    first = host.entries[ntype].ids if host is not None and ntype in host.entries else torch.empty(0, dtype=torch.long)
    return torch.cat([first, owned_degree_ranking(graph_store, ntype)])


def _row_bytes(feature_store, t: str, names: Sequence[str]) -> Tuple[Dict[str, Tensor], int]:
    cols = {n: feature_store.get_tensor(t if feature_store.is_hetero else None, n) for n in names}
    return cols, sum((c[0].numel() if c.size(0) else 0) * c.element_size() for c in cols.values())


def _fill(feature_store, t: str, ids: Tensor, cols: Dict[str, Tensor], device, timeout: float) -> Dict[str, Tensor]:
    """Rows of ``ids`` on ``device``, read through the feature store in chunks (local, host-cached or remote)."""
    rows = {n: torch.empty((ids.numel(),) + tuple(c.shape[1:]), dtype=c.dtype, device=device) for n, c in cols.items()}
    per_row = max(sum(c[0].numel() * c.element_size() for c in cols.values() if c.size(0)), 1)
    step = max(FILL_CHUNK_BYTES // per_row, 1)
    for lo in range(0, ids.numel(), step):
        chunk = ids[lo:lo + step]
        got = feature_store.lookup_many_async({t: chunk}, {t: list(cols)}).wait(timeout)[t]
        for n in cols:
            rows[n][lo:lo + chunk.numel()].copy_(got[n])
    return rows


#: What the fill uses of a feature store: its partition book and lookups (a LocalFeatureStore has them).
_STORE_NEEDS = ("book", "partition", "cache", "get_tensor", "lookup_many_async", "is_hetero")


def build_device_cache(feature_store, graph_store, device, max_bytes: int,
                       attr_names: Optional[Sequence[str]] = None, timeout: float = 120.0) -> DeviceFeatureCache:
    """Fills a :class:`DeviceFeatureCache` of this partition's hottest rows within ``max_bytes`` (see the
    module docstring for the order). Call it after RPC started when the folder has remote rows to cache.

    Args:
        feature_store: This rank's :class:`~pyg_dist.store.LocalFeatureStore`.
        graph_store: This rank's :class:`~pyg_dist.store.LocalGraphStore` (its in-edges rank the owned rows).
        device: Where the rows go (a CUDA device in training; any device works).
        max_bytes: Most bytes of rows on the device, shared between node types in proportion to their owned
            rows' bytes.
        attr_names: Node attributes to cache (default ``x``, ``y``, ``time`` where the folder has them).
        timeout: Seconds per fill lookup.
    """
    if not all(hasattr(feature_store, a) for a in _STORE_NEEDS):  # a LocalFeatureStore (this stage sits below it)
        raise InvalidArgumentError(_WHERE, "feature_store", feature_store, "a pyg_dist.store.LocalFeatureStore")
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise InvalidArgumentError(_WHERE, "max_bytes", max_bytes, "a positive number of bytes")
    device = normal_device(device)
    attrs = cached_attrs(feature_store, attr_names, _WHERE)
    sized = {t: _row_bytes(feature_store, t, names) for t, names in attrs.items()}
    own = {t: feature_store.book.owned_ids(t, feature_store.partition).numel() * sized[t][1] for t in attrs}
    total = max(sum(own.values()), 1)
    ids, rows = {}, {}
    for t in attrs:
        cols, row_bytes = sized[t]
        keep = rows_within(max_bytes * own[t] / total if len(attrs) > 1 else max_bytes, row_bytes)
        chosen = torch.sort(_candidates(feature_store, graph_store, t)[:keep]).values
        ids[t], rows[t] = chosen, _fill(feature_store, t, chosen, cols, device, timeout)
    return DeviceFeatureCache(ids, rows, device)


__all__ = ["DeviceFeatureCache", "DeviceRowIndex", "DeviceRows", "build_device_cache", "normal_device",
           "DEFAULT_DEVICE_ATTRS"]
