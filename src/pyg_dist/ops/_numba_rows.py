"""Numba row copies on 2-D word views (sequential, GIL released): ``out[out_pos[i]] = src[src_rows[i]]``
and the plain gather ``out[i] = src[src_rows[i]]``."""
from __future__ import annotations

import numpy as np
from numba import njit

from pyg_dist.ops._numba_sample import _prefetch

_AHEAD = 4


@njit(cache=True, nogil=True)
def copy_rows(out, out_pos, src, src_rows):
    """Row gather-scatter; ``src_rows`` of length 0 means ``src`` row ``i`` for position ``i``. Returns -1,
    or the first ``i`` whose position or row is out of range (nothing copied from there on)."""
    w = src.shape[1]
    m = out_pos.shape[0]
    direct = src_rows.shape[0] == 0
    for i in range(m):
        r = i if direct else src_rows[i]
        if not direct and i + _AHEAD < m:
            _prefetch(src, src_rows[i + _AHEAD] * w)
        p = out_pos[i]
        if p < 0 or p >= out.shape[0] or r < 0 or r >= src.shape[0]:
            return i
        for k in range(w):
            out[p, k] = src[r, k]
    return -1


@njit(cache=True, nogil=True)
def take_rows(out, src, src_rows):
    """``out[i] = src[src_rows[i]]``; returns -1, or the first ``i`` whose row is outside ``src`` (rows
    from there on are not copied)."""
    w = src.shape[1]
    n = src.shape[0]
    m = src_rows.shape[0]
    for i in range(m):
        r = src_rows[i]
        if r < 0 or r >= n:
            return i
        if i + _AHEAD < m:
            _prefetch(src, src_rows[i + _AHEAD] * w)
        for k in range(w):
            out[i, k] = src[r, k]
    return -1


@njit(cache=True, nogil=True)
def scatter_segments(pos, counts, nbr, edge, out_nbr, out_edge, out_counts):
    """Segment ``j`` of ``nbr`` / ``edge`` (``counts[j]`` consecutive entries) becomes segment ``pos[j]``."""
    m = pos.shape[0]
    for j in range(m):
        out_counts[pos[j]] = counts[j]
    start = np.empty(m + 1, dtype=np.int64)
    start[0] = 0
    for i in range(m):
        start[i + 1] = start[i] + out_counts[i]
    src = 0
    for j in range(m):
        c = counts[j]
        dst = start[pos[j]]
        for t in range(c):
            out_nbr[dst + t] = nbr[src + t]
            out_edge[dst + t] = edge[src + t]
        src += c


@njit(cache=True, nogil=True)
def place_segments(pos, counts, nbr, edge, start, seed_offset, out_nbr, out_edge, out_col):
    """Segment ``j`` of ``nbr`` / ``edge`` (``counts[j]`` entries) goes to ``start[pos[j]]`` of the outputs,
    with ``out_col = seed_offset + pos[j]`` (one piece of a merge: see ``EdgeBuffer.append_pieces``)."""
    s = 0
    for j in range(pos.shape[0]):
        p = pos[j]
        c = counts[j]
        d = start[p]
        for t in range(c):
            out_nbr[d + t] = nbr[s + t]
            out_edge[d + t] = edge[s + t]
            out_col[d + t] = seed_offset + p
        s += c
