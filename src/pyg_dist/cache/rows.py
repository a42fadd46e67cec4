"""``FeatureCache``: read-only copies of feature rows other partitions own, kept by this partition.

On the reference graph a quarter of every batch's feature rows belong to other partitions, and no
partitioning does better (``scripts/locality_ceiling.py``). Features do not change during training,
so a partition can keep copies of the remote rows its batches ask for most; the feature lookup then
reads owned rows locally, cached rows from here, and only the rest from their owners
(:func:`pyg_dist.store.lookup.plan_lookup`). Which rows: :mod:`pyg_dist.cache.ranking`.

Layout: per node type a SORTED int64 array of global ids and, per cached attribute, one row per id.
The ids are the persistent form (``part_<i>/feature_cache.pt``, written by the partitioner, or a
cache filled at start-up into shared memory); each process builds an int32 slot map over the span of
cached ids on first use (4 bytes per id of the span: 10 MB for 2.4 M nodes, one gather per lookup,
~80x faster than a binary search), or binary-searches when the span is larger than
:data:`SLOT_MAP_LIMIT`. Learnable columns (``DistEmbedding``) are never cached: they change.

A trainer and its sampler workers share one copy: a cache read from the folder is re-opened
memory-mapped by every process (the page cache holds it once); a cache filled at start-up lives in
shared memory and travels to the workers as a handle.

Example:
    >>> import torch
    >>> cache = FeatureCache({"_N": CacheEntry(torch.tensor([2, 7]), {"x": torch.tensor([[2.], [7.]])})})
    >>> hit_pos, rows, miss = cache.lookup(torch.tensor([7, 3, 2]))
    >>> hit_pos.tolist(), rows["x"].tolist(), miss.tolist()
    ([0, 2], [[7.0], [2.0]], [3])
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import torch
from torch import Tensor

from pyg_dist._types import HOMO_NODE
from pyg_dist.cache.file import CacheEntry, read_feature_cache, save_feature_cache
from pyg_dist.errors import InvalidArgumentError, PartitionFormatError

#: Largest slot map (bytes) a process builds; above it, lookups binary-search the sorted ids.
SLOT_MAP_LIMIT = 1 << 30
_WHERE = "FeatureCache"


@dataclass
class CacheStats:
    """Rows of eligible lookups answered by the cache (``hits``) and fetched remotely (``misses``), per type."""
    hits: Dict[str, int] = field(default_factory=dict)
    misses: Dict[str, int] = field(default_factory=dict)
    bytes_saved: int = 0

    def hit_rate(self, group: Optional[str] = None) -> float:
        """Fraction of remote-owned rows answered by the cache (one type, or all)."""
        keys = [group] if group is not None else list(set(self.hits) | set(self.misses))
        h = sum(self.hits.get(k, 0) for k in keys)
        m = sum(self.misses.get(k, 0) for k in keys)
        return h / max(h + m, 1)


class FeatureCache:
    """Copies of remote feature rows (see the module docstring).

    Args:
        entries: Node type -> :class:`CacheEntry` (``ids`` sorted ascending, no repeats).
        info: What made it (policy, budget, fill seconds, fingerprint, partition); free-form.
        path: The file it was read from (processes that receive it re-open that file).
    """

    def __init__(self, entries: Mapping[str, CacheEntry], info: Optional[Dict[str, Any]] = None,
                 path: Optional[Path] = None):
        for t, e in entries.items():
            _check_entry(t, e)
        self.entries: Dict[str, CacheEntry] = dict(entries)
        self.info: Dict[str, Any] = dict(info or {})
        self.path = path
        self.stats = CacheStats()
        self._maps: Dict[str, Tuple[int, Optional[Tensor]]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ description
    @property
    def nbytes(self) -> int:
        """Bytes of the cached ids and rows (the budget counts these)."""
        return sum(e.nbytes for e in self.entries.values())

    @property
    def num_rows(self) -> Dict[str, int]:
        return {t: e.ids.numel() for t, e in self.entries.items()}

    def covers(self, group, attr_names: Sequence[str]) -> bool:
        """Whether lookups of ``attr_names`` of ``group`` can be answered from here."""
        e = self.entries.get(group) if isinstance(group, str) else None
        return e is not None and e.ids.numel() > 0 and all(n in e.cols for n in attr_names)

    def __repr__(self) -> str:
        return f"FeatureCache(rows={self.num_rows}, MB={self.nbytes / 2 ** 20:.1f}, info={self.info})"

    # ------------------------------------------------------------------ lookups
    def slots(self, group: str, ids: Tensor) -> Tensor:
        """Row of each id in the cache (int64), ``-1`` where it is not cached."""
        e = self.entries[group]
        lo, table = self._slot_map(group)
        if table is not None:
            from pyg_dist.ops._torch_book import slots_in_table
            return slots_in_table(ids, table, lo)
        pos = torch.searchsorted(e.ids, ids).clamp_(max=max(e.ids.numel() - 1, 0))
        return torch.where(e.ids.index_select(0, pos) == ids, pos, torch.full_like(pos, -1))

    def split_positions(self, group: str, ids: Tensor, pos: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """Of positions ``pos`` into 1-D int64 ``ids``: ``(hit positions, their cache rows, miss
        positions)``, each in the order of ``pos`` (one pass over the slot map; not counted in :attr:`stats`)."""
        lo, table = self._slot_map(group)
        if table is None:
            slot = self.slots(group, ids.index_select(0, pos))
            hit = slot >= 0
            return pos[hit], slot[hit], pos[~hit]
        from pyg_dist.ops.graph_kernels import split_by_slot
        hit_pos, hit_slot, miss = split_by_slot(ids.numpy(), pos.to(torch.int64).numpy(), table.numpy(), lo)
        return torch.from_numpy(hit_pos), torch.from_numpy(hit_slot), torch.from_numpy(miss)

    def split(self, group: str, ids: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """``(hit positions, their cache rows, miss positions)`` of ``ids``; counts them in :attr:`stats`."""
        slot = self.slots(group, ids)
        hit = slot >= 0
        hit_pos, miss_pos = hit.nonzero().view(-1), (~hit).nonzero().view(-1)
        self.count(group, hit_pos.numel(), miss_pos.numel())
        return hit_pos, slot.index_select(0, hit_pos), miss_pos

    def lookup(self, ids: Tensor, group: str = HOMO_NODE,
               attr_names: Optional[Sequence[str]] = None) -> Tuple[Tensor, Dict[str, Tensor], Tensor]:
        """``(hit positions, {name: rows of the hits}, miss ids)`` for 1-D int64 global ``ids``.

        Raises:
            InvalidArgumentError: a type or attribute the cache does not hold.
        """
        if group not in self.entries:
            raise InvalidArgumentError(f"{_WHERE}.lookup", "group", group, f"a cached node type {sorted(self.entries)}")
        cols = self.entries[group].cols
        names = list(cols) if attr_names is None else list(attr_names)
        for n in names:
            if n not in cols:
                raise InvalidArgumentError(f"{_WHERE}.lookup", "attr_names", n, f"a cached attribute {sorted(cols)}")
        hit_pos, rows, miss_pos = self.split(group, ids)
        return hit_pos, {n: cols[n].index_select(0, rows) for n in names}, ids.index_select(0, miss_pos)

    def column(self, group: str, name: str) -> Tensor:
        """The cached rows of one attribute (row ``i`` belongs to ``entries[group].ids[i]``)."""
        return self.entries[group].cols[name]

    def count(self, group: str, hits: int, misses: int) -> None:
        """Adds ``hits`` rows answered here and ``misses`` fetched remotely to :attr:`stats`."""
        s = self.stats
        s.hits[group] = s.hits.get(group, 0) + hits
        s.misses[group] = s.misses.get(group, 0) + misses
        s.bytes_saved += hits * (self.entries[group].row_bytes - 8)

    def _slot_map(self, group: str) -> Tuple[int, Optional[Tensor]]:
        """``(lowest cached id, int32 table over the span)``, or ``(0, None)`` when the span is too large."""
        got = self._maps.get(group)
        if got is None:
            with self._lock:
                got = self._maps.get(group) or _build_map(self.entries[group].ids)
                self._maps[group] = got
        return got

    @property
    def index_bytes(self) -> int:
        """Bytes of this process's slot maps (not part of the budget: a per-process index)."""
        return sum(t.numel() * 4 for _, t in self._maps.values() if t is not None)

    # ------------------------------------------------------------------ persistence and sharing
    def save(self, path) -> None:
        """Writes the cache to ``path`` (``torch.save``; read back with :meth:`load`)."""
        save_feature_cache(path, dict(self.entries), self.info)

    @classmethod
    def load(cls, path, mmap: bool = True) -> "FeatureCache":
        """Reads a cache written by :meth:`save` (memory-mapped by default: one copy per machine)."""
        path = Path(path)
        entries, info = read_feature_cache(path, mmap)
        try:
            return cls(entries, info, path=path)
        except InvalidArgumentError as e:
            raise PartitionFormatError(path, f"inconsistent feature cache: {e}") from None

    def share_memory_(self) -> "FeatureCache":
        """Moves the ids and rows to shared memory (sampler workers then map them, no private copy)."""
        for e in self.entries.values():
            e.ids.share_memory_()
            for c in e.cols.values():
                c.share_memory_()
        return self

    def __reduce__(self):
        if self.path is not None:  # another process maps the same file
            return (_reload, (str(self.path), self.info))
        return (FeatureCache, (self.entries, self.info))  # shared-memory tensors travel as handles


def _reload(path: str, info: Dict[str, Any]) -> FeatureCache:
    cache = FeatureCache.load(path, mmap=True)
    cache.info.update(info)
    return cache


def _build_map(ids: Tensor) -> Tuple[int, Optional[Tensor]]:
    if not ids.numel():
        return 0, None
    lo, hi = int(ids[0]), int(ids[-1])
    if (hi - lo + 1) * 4 > SLOT_MAP_LIMIT:
        return 0, None
    table = torch.full((hi - lo + 1,), -1, dtype=torch.int32)
    table[ids - lo] = torch.arange(ids.numel(), dtype=torch.int32)
    return lo, table


def _check_entry(group, e: CacheEntry) -> None:
    ids = e.ids
    if not isinstance(ids, Tensor) or ids.dtype != torch.int64 or ids.dim() != 1:
        raise InvalidArgumentError(_WHERE, "ids", getattr(ids, "dtype", ids), f"1-D int64 global ids of {group!r}")
    if ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all()):
        raise InvalidArgumentError(_WHERE, "ids", f"ids of {group!r}", "ascending ids without repeats")
    for name, col in e.cols.items():
        if not isinstance(col, Tensor) or col.dim() == 0 or col.size(0) != ids.numel():
            raise InvalidArgumentError(_WHERE, "cols", f"{name!r} of {group!r} with shape "
                                       f"{tuple(getattr(col, 'shape', ()))}", f"{ids.numel()} rows (one per id)")


__all__ = ["FeatureCache", "CacheEntry", "CacheStats", "SLOT_MAP_LIMIT"]
