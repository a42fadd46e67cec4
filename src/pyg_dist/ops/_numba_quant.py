"""Numba kernels of the int8 row codec (sequential, GIL released): see :mod:`pyg_dist.ops.quant` for the format.

Both kernels check every index against the arrays they read and write: nothing is read or written out of
bounds whatever the input; the first offending entry is returned instead.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from pyg_dist.ops._numba_sample import _prefetch

_AHEAD = 4


@njit(cache=True, nogil=True)
def quantise_rows(src, rows, limit, q, scale, offset):
    """Encodes ``src[rows[i]]`` (``rows`` of length 0: ``src[i]``) into ``q[i]``, ``scale[i]``, ``offset[i]``.

    Returns ``(0, -1)``, ``(1, i)`` when row ``i`` holds NaN / inf or a magnitude over ``limit``, or ``(2, i)``
    when ``rows[i]`` is outside ``src`` (nothing is encoded from there on).
    """
    w = src.shape[1]
    m = q.shape[0]
    direct = rows.shape[0] == 0
    for i in range(m):
        r = i if direct else rows[i]
        if r < 0 or r >= src.shape[0]:
            return 2, i
        if not direct and i + _AHEAD < m:
            _prefetch(src, rows[i + _AHEAD] * w)
        lo = np.inf
        hi = -np.inf
        for k in range(w):
            v = np.float64(src[r, k])
            if not abs(v) <= limit:  # NaN fails every comparison
                return 1, i
            lo = min(lo, v)
            hi = max(hi, v)
        s = np.float32((hi - lo) / 255.0)
        if s == 0:
            o = np.float32(lo)
            inv = 0.0
        else:
            o = np.float32(lo + 128.0 * np.float64(s))
            inv = 1.0 / np.float64(s)
        scale[i] = s
        offset[i] = o
        o64 = np.float64(o)
        for k in range(w):
            t = np.rint((np.float64(src[r, k]) - o64) * inv)
            q[i, k] = np.int8(min(127.0, max(-128.0, t)))
    return 0, -1


@njit(cache=True, nogil=True)
def dequantise_rows(out, pos, q, scale, offset, index):
    """``out[pos[i]] = q[index[i]] * scale[index[i]] + offset[index[i]]`` in float32 arithmetic (``index`` of
    length 0: row ``i``). Returns -1, or the first ``i`` whose position or row is out of range."""
    w = q.shape[1]
    m = pos.shape[0]
    direct = index.shape[0] == 0
    for i in range(m):
        r = i if direct else index[i]
        p = pos[i]
        if p < 0 or p >= out.shape[0] or r < 0 or r >= q.shape[0]:
            return i
        s = scale[r]
        o = offset[r]
        for k in range(w):
            out[p, k] = np.float32(q[r, k]) * s + o
    return -1
