"""The folder's cache files, shared by the partitioner (which writes ``feature_cache.pt`` / ``topology_cache.pt``
with ``--cache-ratio``, its rows chosen by :mod:`pyg_dist.cache.ranking`) and the runtime (which reads them, or
ranks and fills a cache at start-up).

``feature_cache.pt`` = ``{"version": 1, "info": {...}, "types": {ntype: {"ids": sorted global ids, "cols":
{name: rows}}}}``; ``topology_cache.pt`` = ``{"info": {...}, "types": {"src__rel__dst":``
:class:`~pyg_dist.format.schema.TopologyCacheEntry` ``}}``.

Example:
    >>> import torch
    >>> rows_within(1000, row_bytes=92)      # 92 bytes of a row's columns plus its 8-byte id
    10
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Tuple

import torch
from torch import Tensor

from pyg_dist._fsio import save
from pyg_dist.errors import PartitionFormatError

#: Attributes cached by default (those the loaders fetch), where the folder has them.
DEFAULT_CACHE_ATTRS = ("x", "y", "time")
FEATURE_CACHE_VERSION = 1


@dataclass
class CacheEntry:
    """The cached rows of one node type: ``ids`` (sorted global ids) and ``cols[name][i]`` = row of ``ids[i]``."""
    ids: Tensor
    cols: Dict[str, Tensor]

    @property
    def row_bytes(self) -> int:
        """Bytes of one cached row over all attributes, its id included."""
        return 8 + sum(c[0].numel() * c.element_size() if c.size(0) else 0 for c in self.cols.values())

    @property
    def nbytes(self) -> int:
        return self.ids.numel() * 8 + sum(c.numel() * c.element_size() for c in self.cols.values())


def rows_within(budget_bytes: float, row_bytes: int) -> int:
    """Rows of ``row_bytes`` (plus an 8-byte id each) that fit in ``budget_bytes``."""
    return int(budget_bytes // (row_bytes + 8))


# ------------------------------------------------------------------------------------------- files
def save_feature_cache(path, entries: Dict[str, CacheEntry], info: Dict[str, Any]) -> None:
    """Writes ``feature_cache.pt`` durably (:func:`pyg_dist._fsio.save`); read back with :func:`read_feature_cache`."""
    save({"version": FEATURE_CACHE_VERSION, "info": info,
          "types": {t: {"ids": e.ids, "cols": e.cols} for t, e in entries.items()}}, path)


def read_feature_cache(path, mmap: bool = True) -> Tuple[Dict[str, CacheEntry], Dict[str, Any]]:
    """``(entries, info)`` of a ``feature_cache.pt``; :class:`PartitionFormatError` naming the file."""
    path = Path(path)
    try:
        raw = torch.load(path, mmap=mmap, weights_only=True)
        entries = {t: CacheEntry(v["ids"], dict(v["cols"])) for t, v in raw["types"].items()}
        return entries, dict(raw["info"])
    except (OSError, RuntimeError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise PartitionFormatError(path, f"unreadable feature cache ({type(e).__name__}: {e})") from None


def save_topology_cache(path, info: Dict[str, Any], types: Dict[str, Dict[str, Tensor]]) -> None:
    """Writes ``topology_cache.pt`` (durably): ``types`` maps ``"src__rel__dst"`` to a topology entry's dict."""
    save({"info": info, "types": types}, path)


def read_topology_cache(path, mmap: bool = True) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``(info, types)`` of a ``topology_cache.pt``; :class:`PartitionFormatError` naming the file."""
    try:
        raw = torch.load(path, mmap=mmap, weights_only=True)
        return raw["info"], raw["types"]
    except (OSError, RuntimeError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise PartitionFormatError(path, f"unreadable topology cache ({type(e).__name__}: {e})") from None
