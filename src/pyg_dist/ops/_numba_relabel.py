"""Numba relabel kernels (CPU, sequential: first-seen order is inherently ordered).

``relabel_dense`` maps global ids through a dense per-type scratch array that batches reuse without
clearing it: a batch writes ``base + local index`` and reads every entry below its ``base`` (an earlier
batch's, or ``-1``) as unseen; the caller moves ``base`` past the batch's nodes afterwards (or, for
types too large for that, resets the touched entries with ``reset_dense``). ``relabel_hash`` keys on
``batch * num_nodes + id`` (disjoint subgraphs) in an open-addressing table of ``2**bits`` slots (``-1`` =
empty) that the caller keeps at most half full.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from pyg_dist.ops._numba_sample import _prefetch

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
#: Ids looked up ahead in the dense map (its loop body is a few instructions: 8 ahead is too close).
_AHEAD_MAP = 16


@njit(cache=True, nogil=True)
def _first_outside(ids, size):
    """Position of the first id outside ``[0, size)``, or -1 (one sequential pass)."""
    for j in range(ids.shape[0]):
        g = ids[j]
        if g < 0 or g >= size:
            return j
    return -1


@njit(cache=True, nogil=True)
def relabel_dense(nbr, mapping, base, nodes, n, out):
    """Writes the local index of every ``nbr`` to ``out``; unseen ids are appended to ``nodes[n:]``.

    ``mapping[g] - base`` is ``g``'s local index when not negative (the caller keeps ``base`` plus the
    type's node count within int32). Returns the new node count, or ``-1 - j`` when ``nbr[j]`` is the first
    id outside ``[0, len(mapping))``: then nothing was read or written (a first pass checks every id).
    """
    m = nbr.shape[0]
    bad = _first_outside(nbr, mapping.shape[0])
    if bad >= 0:
        return -1 - bad
    for j in range(m):
        if j + _AHEAD_MAP < m:
            _prefetch(mapping, nbr[j + _AHEAD_MAP])
        g = nbr[j]
        loc = np.int64(mapping[g]) - base
        if loc < 0:
            loc = n
            mapping[g] = base + n
            nodes[n] = g
            n += 1
        out[j] = loc
    return n


@njit(cache=True, nogil=True)
def relabel_hash(nbr, nbr_batch, num_nodes, keys, vals, bits, nodes, batch, n, out):
    """Like :func:`relabel_dense` but per ``(batch, id)`` pair; appends to ``nodes`` and ``batch``. Returns
    ``-1 - j`` (nothing written) when ``nbr[j]`` is the first id outside ``[0, num_nodes)``."""
    bad = _first_outside(nbr, num_nodes)
    if bad >= 0:
        return -1 - bad
    mask = keys.shape[0] - 1
    shift = np.uint64(64 - bits)
    for j in range(nbr.shape[0]):
        g = nbr[j]
        b = nbr_batch[j]
        key = b * num_nodes + g
        h = np.int64((np.uint64(key) * _GOLDEN) >> shift)
        while True:
            cur = keys[h]
            if cur == key:
                loc = vals[h]
                break
            if cur == -1:
                keys[h] = key
                vals[h] = n
                nodes[n] = g
                batch[n] = b
                loc = n
                n += 1
                break
            h = (h + 1) & mask
        out[j] = loc
    return n


@njit(cache=True, nogil=True)
def reset_dense(mapping, nodes, n):
    """Marks ``nodes[:n]`` unseen again in ``mapping``."""
    for j in range(n):
        if j + _AHEAD_MAP < n:
            _prefetch(mapping, nodes[j + _AHEAD_MAP])
        mapping[nodes[j]] = -1
