"""Pure-torch twins of the range partition book's numba kernels (:mod:`pyg_dist.ops._numba_book`).

Same arguments (numpy int64 arrays, ``bounds`` ascending), same results, order and dtypes; used when
numba is missing or switched off (``$PYG_DIST_BACKEND=torch``). The arrays are viewed as tensors
without copies.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np
import torch
from torch import Tensor


def _range_index(ids: Tensor, bounds: Tensor) -> Tensor:
    """Index ``p`` of the range holding each id: how many inner bounds ``bounds[1:-1]`` are ``<= id``.

    The numba kernel's scan counts the same thing, so ids outside ``[bounds[0], bounds[-1])`` land in
    the first or last range there too.
    """
    return torch.searchsorted(bounds[1:-1].contiguous(), ids, right=True)


def rows_in_range(ids: np.ndarray, start: int, end: int, out: np.ndarray) -> bool:
    """Writes ``ids - start`` to ``out`` and returns True when every id lies in ``[start, end)``; else
    returns False (``out`` then holds nothing useful)."""
    t = torch.from_numpy(ids)
    if t.numel() and (int(t.min()) < start or int(t.max()) >= end):
        return False
    torch.sub(t, start, out=torch.from_numpy(out))
    return True


def count_by_range(ids: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """How many of ``ids`` each range of ``bounds`` holds (int64, ``len(bounds) - 1`` entries)."""
    b = torch.from_numpy(bounds)
    owner = _range_index(torch.from_numpy(ids), b)
    return torch.bincount(owner, minlength=b.numel() - 1).numpy()


def split_by_range(ids: np.ndarray, bounds: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions of ``ids`` grouped by the range of ``bounds`` holding them: ``(order, rows, ptr)``.

    ``order[ptr[p]:ptr[p + 1]]`` are the positions in range ``p``, ascending (a stable sort by range);
    ``rows`` (aligned with ``order``) is each id minus its range's start. All int64.
    """
    t, b = torch.from_numpy(ids), torch.from_numpy(bounds)
    owner = _range_index(t, b)
    order = torch.sort(owner, stable=True).indices
    rows = t.index_select(0, order).long() - b.long().index_select(0, owner.index_select(0, order))
    ptr = torch.zeros(b.numel(), dtype=torch.int64)
    torch.cumsum(torch.bincount(owner, minlength=b.numel() - 1), 0, out=ptr[1:])
    return order.numpy(), rows.numpy(), ptr.numpy()


def slots_in_table(ids: Tensor, table: Tensor, lo: int) -> Tensor:
    """``table[id - lo]`` of each id (int64), ``-1`` for ids outside the table."""
    rel = ids - lo
    inside = (rel >= 0) & (rel < table.numel())
    slot = torch.full_like(rel, -1)
    slot[inside] = table.index_select(0, rel[inside]).long()
    return slot


def split_by_slot(ids: np.ndarray, pos: np.ndarray, table: np.ndarray, lo: int
                  ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions ``pos`` into ``ids`` split by ``table[ids[p] - lo]`` (a slot >= 0, else none; ids
    outside the table have none): ``(hit_pos, hit_slot, miss_pos)`` in the order of ``pos``, int64."""
    p = torch.from_numpy(pos)
    slot = slots_in_table(torch.from_numpy(ids).index_select(0, p), torch.from_numpy(table), lo)
    hit = slot >= 0
    return p[hit].numpy(), slot[hit].numpy(), p[~hit].numpy()
