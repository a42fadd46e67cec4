"""Numba kernels of the range partition book: route ids by the range that holds them, in one pass.

Reached only through :mod:`pyg_dist.ops.graph_kernels`, which picks these or the torch twins in
:mod:`pyg_dist.ops._torch_book` (same results, same order, same dtypes). All take numpy int64 arrays;
``bounds`` is ascending with ``bounds[0] == 0``. Serial and ``nogil``: RPC threads route concurrently.
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def rows_in_range(ids, start, end, out):  # pragma: no cover - compiled
    """Writes ``ids - start`` to ``out``; returns False at the first id outside ``[start, end)``."""
    for i in range(ids.shape[0]):
        v = ids[i]
        if v < start or v >= end:
            return False
        out[i] = v - start
    return True


@njit(cache=True, nogil=True)
def _range_of(v, bounds, k):  # pragma: no cover - compiled
    """Index ``p`` with ``bounds[p] <= v < bounds[p + 1]`` (branch-free scan: k is small)."""
    p = 0
    for q in range(1, k):
        p += bounds[q] <= v
    return p


@njit(cache=True, nogil=True)
def count_by_range(ids, bounds):  # pragma: no cover - compiled
    """How many of ``ids`` each range of ``bounds`` holds."""
    k = bounds.shape[0] - 1
    counts = np.zeros(k, dtype=np.int64)
    for i in range(ids.shape[0]):
        counts[_range_of(ids[i], bounds, k)] += 1
    return counts


@njit(cache=True, nogil=True)
def split_by_range(ids, bounds):  # pragma: no cover - compiled
    """Groups positions of ``ids`` by the range of ``bounds`` holding them (stable counting sort).

    Returns ``(order, rows, ptr)``: ``order[ptr[p]:ptr[p + 1]]`` are the positions owned by ``p``,
    ascending; ``rows`` (aligned with ``order``) is each id's row in its owner's block.
    """
    n = ids.shape[0]
    k = bounds.shape[0] - 1
    ptr = np.zeros(k + 1, dtype=np.int64)
    for i in range(n):
        ptr[_range_of(ids[i], bounds, k) + 1] += 1
    for p in range(k):
        ptr[p + 1] += ptr[p]
    cur = ptr[:-1].copy()
    order = np.empty(n, dtype=np.int64)
    rows = np.empty(n, dtype=np.int64)
    for i in range(n):
        v = ids[i]
        o = _range_of(v, bounds, k)
        j = cur[o]
        order[j] = i
        rows[j] = v - bounds[o]
        cur[o] = j + 1
    return order, rows, ptr


@njit(cache=True, nogil=True)
def split_by_slot(ids, pos, table, lo):  # pragma: no cover - compiled
    """Splits positions ``pos`` into ``ids`` by ``table[ids[p] - lo]`` (a slot, or -1 / outside: none).

    Returns ``(hit_pos, hit_slot, miss_pos)``, each in the order of ``pos``.
    """
    m, n = pos.shape[0], table.shape[0]
    hit_pos = np.empty(m, dtype=np.int64)
    hit_slot = np.empty(m, dtype=np.int64)
    miss_pos = np.empty(m, dtype=np.int64)
    h = k = 0
    for i in range(m):
        p = pos[i]
        r = ids[p] - lo
        s = table[r] if 0 <= r < n else -1
        if s >= 0:
            hit_pos[h] = p
            hit_slot[h] = s
            h += 1
        else:
            miss_pos[k] = p
            k += 1
    return hit_pos[:h], hit_slot[:h], miss_pos[:k]
