"""The graph layout every sampling kernel reads: in-edges grouped by destination (CSC).

A :class:`CSC` holds one edge type. ``colptr`` is indexed by a LOCAL destination index (in a partition:
``dst_global - dst_start``); ``row`` holds the GLOBAL source (neighbour) ids; ``edge_id`` the global
edge ids (``None`` means "the position in ``row`` plus ``edge_offset``"). Optional per-edge ``weight`` and
``edge_time`` are aligned with ``row``.

``row`` and ``edge_id`` are int64, or int32 after :meth:`CSC.compact` when every value fits: the sampling
kernels read a neighbour list of half the bytes (on the reference graph the sampling pass takes ~0.6x the
time), and every id they hand out is int64 again. :meth:`CSC.compact` also drops ``edge_id`` when it is one
ascending run (a pyg_dist partition's edges are numbered in CSC order), keeping only its first id.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, overload

import torch
from torch import Tensor

from pyg_dist.errors import InvalidArgumentError


@dataclass(frozen=True)
class CSC:
    """In-edges of one edge type, grouped by destination.

    Attributes:
        colptr: int64 ``[num_dst + 1]``; the in-edges of local destination ``d`` are
            ``row[colptr[d]:colptr[d + 1]]``.
        row: int64 (or int32, see :meth:`compact`) ``[num_edges]`` global source ids.
        edge_id: int64 (or int32) ``[num_edges]`` global edge ids, or ``None`` (= position + ``edge_offset``).
        weight: float64 ``[num_edges]`` non-negative sampling weights, or ``None`` (uniform).
        edge_time: ``[num_edges]`` timestamps (int64 or float64), or ``None``.
        edge_offset: Without ``edge_id``, the id of the edge at position ``p`` is ``p + edge_offset``.

    Example:
        >>> csc = CSC.from_edge_index(torch.tensor([[0, 1, 2], [1, 2, 0]]), num_dst=3)
        >>> csc.colptr.tolist(), csc.row.tolist(), csc.edge_id.tolist()
        ([0, 1, 2, 3], [2, 0, 1], [2, 0, 1])
    """

    colptr: Tensor
    row: Tensor
    edge_id: Optional[Tensor] = None
    weight: Optional[Tensor] = None
    edge_time: Optional[Tensor] = None
    edge_offset: int = 0

    @property
    def num_dst(self) -> int:
        return self.colptr.numel() - 1

    @property
    def num_edges(self) -> int:
        return self.row.numel()

    def validate(self, where: str = "CSC") -> "CSC":
        """Checks shapes and dtypes; raises :class:`InvalidArgumentError` naming the field."""
        if self.colptr.dim() != 1 or self.colptr.numel() < 1 or self.colptr.dtype != torch.int64:
            raise InvalidArgumentError(where, "colptr", self.colptr, "a 1-D int64 tensor of num_dst + 1")
        if self.row.dim() != 1 or self.row.dtype not in _ID_DTYPES:
            raise InvalidArgumentError(where, "row", self.row, "a 1-D int64 (or int32) tensor")
        if int(self.colptr[-1]) != self.row.numel() or int(self.colptr[0]) != 0:
            raise InvalidArgumentError(where, "colptr", self.colptr,
                                       f"colptr[0] == 0 and colptr[-1] == len(row) == {self.row.numel()}")
        for name in ("edge_id", "weight", "edge_time"):
            value = getattr(self, name)
            if value is not None and (value.dim() != 1 or value.numel() != self.row.numel()):
                raise InvalidArgumentError(where, name, value, f"a 1-D tensor of {self.row.numel()} values")
        if self.edge_id is not None and self.edge_id.dtype not in _ID_DTYPES:
            raise InvalidArgumentError(where, "edge_id", self.edge_id.dtype, "int64 or int32")
        off = self.edge_offset
        if isinstance(off, bool) or not isinstance(off, int) or off < 0 or (off and self.edge_id is not None):
            raise InvalidArgumentError(where, "edge_offset", off, "an int >= 0, and 0 when edge_id is given")
        if self.weight is not None and (self.weight.dtype != torch.float64 or bool((self.weight < 0).any())):
            raise InvalidArgumentError(where, "weight", self.weight, "non-negative float64 weights")
        return self

    @staticmethod
    def from_edge_index(edge_index: Tensor, num_dst: int, *, edge_id: Optional[Tensor] = None,
                        weight: Optional[Tensor] = None, edge_time: Optional[Tensor] = None,
                        is_sorted: bool = False, sort_key: Optional[Tensor] = None) -> "CSC":
        """Builds the CSC of ``edge_index = [src; dst]`` (global edge ids default to ``arange(E)``).

        Args:
            edge_index: ``[2, E]`` source and destination ids.
            num_dst: Number of destination nodes (``colptr`` has ``num_dst + 1`` entries).
            edge_id: Ids to report per edge (default: its column in ``edge_index``; stored as
                ``None`` when ``is_sorted``, since positions then are those columns).
            weight: Per-edge weights aligned with ``edge_index``.
            edge_time: Per-edge timestamps aligned with ``edge_index``.
            is_sorted: ``edge_index`` is already sorted by destination (skips the sort).
            sort_key: Per-edge second key: each destination's in-edges ordered by it (a stable sort, ties
                keep their input order), as PyG orders them by source node time or edge time; unused when
                ``is_sorted``.
        """
        src, dst = edge_index[0].long(), edge_index[1].long()
        eid = None if edge_id is None else edge_id.long()
        if not is_sorted:
            eid = torch.arange(src.numel(), device=src.device) if eid is None else eid
            if sort_key is None:
                perm = torch.sort(dst, stable=True).indices
            else:  # by (dst, sort_key): stable sorts by the second key, then the first
                perm = torch.sort(sort_key.view(-1), stable=True).indices
                perm = perm[torch.sort(dst[perm], stable=True).indices]
            src, dst, eid = src[perm], dst[perm], eid[perm]
            weight = None if weight is None else weight[perm]
            edge_time = None if edge_time is None else edge_time[perm]
        counts = torch.bincount(dst, minlength=num_dst)
        colptr = torch.zeros(num_dst + 1, dtype=torch.int64, device=src.device)
        torch.cumsum(counts, 0, out=colptr[1:])
        weight = None if weight is None else weight.to(torch.float64)
        eid = None if eid is None else eid.contiguous()
        return CSC(colptr, src.contiguous(), eid, weight, normalize_time(edge_time))

    def edge_ids(self, pos: Optional[Tensor] = None) -> Tensor:
        """The int64 global ids of the edges at positions ``pos`` (default: every edge, in CSC order).

        Example:
            >>> CSC(torch.tensor([0, 2]), torch.tensor([4, 5]), edge_offset=10).edge_ids().tolist()
            [10, 11]
        """
        if self.edge_id is not None:
            return self.edge_id.long() if pos is None else self.edge_id[pos].long()
        if pos is None:
            return torch.arange(self.edge_offset, self.edge_offset + self.num_edges, device=self.row.device)
        return pos + self.edge_offset if self.edge_offset else pos

    def compact(self) -> "CSC":
        """This CSC with ``row`` and ``edge_id`` as int32 where all their values fit (CPU only), and without
        ``edge_id`` when its ids are one ascending run (``edge_offset`` = the first); else itself.

        Example:
            >>> csc = CSC.from_edge_index(torch.tensor([[0, 1, 2], [1, 2, 0]]), num_dst=3).compact()
            >>> csc.row.dtype, csc.row.tolist(), csc.edge_id.dtype
            (torch.int32, [2, 0, 1], torch.int32)
            >>> run = CSC(torch.tensor([0, 2]), torch.tensor([4, 5]), edge_id=torch.tensor([7, 8])).compact()
            >>> run.edge_id, run.edge_offset, run.edge_ids().tolist()
            (None, 7, [7, 8])
        """
        row, eid, off = _narrowed(self.row), self.edge_id, self.edge_offset
        if self.edge_id is not None and self.edge_id.device.type == "cpu" and _is_run(self.edge_id):
            eid, off = None, int(self.edge_id[0])
        elif self.edge_id is not None:
            eid = _narrowed(self.edge_id)
        if row is self.row and eid is self.edge_id:
            return self
        return CSC(self.colptr, row, eid, self.weight, self.edge_time, off)

    def share_memory_(self) -> "CSC":
        """Moves every tensor to shared memory (for DataLoader workers); returns ``self``."""
        for name in ("colptr", "row", "edge_id", "weight", "edge_time"):
            value = getattr(self, name)
            if value is not None:
                value.share_memory_()
        return self


_ID_DTYPES = (torch.int64, torch.int32)
_INT32_MAX = 2**31 - 1


def _is_run(ids: Tensor, chunk: int = 1 << 22) -> bool:
    """Whether the 1-D integer ``ids`` are ``ids[0], ids[0] + 1, ...`` (checked in chunks: little extra memory)."""
    if not ids.numel() or ids.dtype not in _ID_DTYPES:
        return False
    first = int(ids[0])
    for lo in range(0, ids.numel(), chunk):
        part = ids[lo:lo + chunk]
        if not torch.equal(part, torch.arange(first + lo, first + lo + part.numel(), dtype=ids.dtype)):
            return False
    return True


def _narrowed(ids: Tensor) -> Tensor:
    """``ids`` as int32 when they are int64 CPU values in ``[0, 2**31)``, else ``ids`` itself."""
    if ids.dtype != torch.int64 or ids.device.type != "cpu" or not ids.numel():
        return ids
    lo, hi = torch.aminmax(ids)
    if int(lo) < 0 or int(hi) > _INT32_MAX:
        return ids
    return ids.to(torch.int32)


@overload
def normalize_time(time: Tensor) -> Tensor: ...


@overload
def normalize_time(time: None) -> None: ...


def normalize_time(time: Optional[Tensor]) -> Optional[Tensor]:
    """Timestamps as contiguous int64 (integer input) or float64 (floating input); ``None`` stays."""
    if time is None:
        return None
    dtype = torch.float64 if time.is_floating_point() else torch.int64
    return time.to(dtype).contiguous()
